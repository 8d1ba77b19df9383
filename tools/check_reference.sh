#!/usr/bin/env bash
# docs/reference.md is what `dptrain help --reference` prints (every command's options from its
# table, the environment variables from base/env.h's): ctest `reference` fails when they differ,
# printing the diff and the command that regenerates the page.
# Usage: tools/check_reference.sh DPTRAIN REFERENCE_MD
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: tools/check_reference.sh DPTRAIN REFERENCE_MD" >&2; exit 2; }
out=$(mktemp "${TMPDIR:-/tmp}/reference.XXXXXX") || exit 2
trap 'rm -f "$out"' EXIT
"$1" help --reference >"$out" || { echo "reference: $1 help --reference failed" >&2; exit 1; }
if diff -u "$2" "$out"; then
  echo "reference: $2 matches dptrain help --reference"
else
  echo "reference: $2 differs from the option and environment tables: run" >&2
  echo "  build/tools/dptrain help --reference > docs/reference.md" >&2
  exit 1
fi
