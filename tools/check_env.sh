#!/usr/bin/env bash
# The environment table of base/env.h is the truth (ctest `env_table`): every variable named in
# a getenv("DPT_...") or dpt_env_get("...") of the sources is an entry, only base/env.c calls
# getenv in the library and the tools, and every entry is read somewhere.
# Usage: tools/check_env.sh [SOURCE_ROOT]
set -uo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$root" || exit 2
export LC_ALL=C
table=$(sed -n 's/^ *X(\([A-Z_][A-Z0-9_]*\),.*/\1/p' base/env.h | sort -u)
[ -n "$table" ] || { echo "env_table: no entries found in base/env.h" >&2; exit 2; }
dirs=(base backends collectives core tools bench examples tests)
fail=0
# Names read by literal, anywhere.
while IFS= read -r name; do
  if ! grep -qx "$name" <<<"$table"; then
    echo "env_table: $name is read but is not in base/env.h's table:" >&2
    grep -rn --include='*.[ch]' -E "(getenv|dpt_env_get)\(\"$name\"" "${dirs[@]}" >&2
    fail=1
  fi
done < <(grep -rhoE --include='*.[ch]' '(getenv|dpt_env_get)\("[A-Za-z_][A-Za-z0-9_]*"' "${dirs[@]}" |
  sed 's/.*("//; s/"$//' | grep '^DPT_' | sort -u)
# The library and the tools read through the table (a name it lacks aborts the read).
if grep -rn --include='*.[ch]' -E '\bgetenv\(' base backends collectives core tools bench examples |
  grep -v -E '^base/env\.c:|^[^:]+:[0-9]+: *(/?\*|//)'; then
  echo "env_table: the getenv calls above bypass base/env.h: use dpt_env_get" >&2
  fail=1
fi
# No stale entry: each is named in some source besides the table.
while IFS= read -r name; do
  if ! grep -rqw --include='*.[ch]' --exclude=env.h "$name" "${dirs[@]}"; then
    echo "env_table: $name is in base/env.h's table but nothing reads it" >&2
    fail=1
  fi
done <<<"$table"
[ $fail -eq 0 ] && echo "env_table: $(wc -l <<<"$table") variables, every read in the table"
exit $fail
