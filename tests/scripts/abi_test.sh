#!/usr/bin/env bash
# The built shared library keeps the ABI of its soname: every exported symbol carries the version
# node DPTRAIN_<abi>, and abidiff (abigail-tools) finds no change against the stored baseline
# cmake/abi/libdptrain-<abi>.abi other than added functions and settings appended to
# dpt_train_config (cmake/abi/dptrain.abignore). Without debug information only the symbols are
# compared. Skips (77) without abidiff.
# Usage: abi_test.sh <build-dir> <source-dir>
set -euo pipefail
build=$1 src=$2
command -v abidiff >/dev/null || { echo "abi: abidiff not found (apt-get install abigail-tools)"; exit 77; }
lib=$(readlink -f "$build/libdptrain.so")
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
abi=${soname#libdptrain.so.}
baseline="$src/cmake/abi/libdptrain-$abi.abi"
[ -f "$baseline" ] || {
  echo "abi: no baseline $baseline for soname $soname (cmake/abi/update_baseline.sh writes it)" >&2
  exit 1
}

# Every exported symbol has the version node of the soname.
exported=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}')
unversioned=$(grep -v "@@DPTRAIN_$abi\$" <<<"$exported" || true)
if [ -n "$unversioned" ]; then
  echo "abi: symbols exported without the version node DPTRAIN_$abi:" >&2
  echo "$unversioned" >&2
  exit 1
fi

if ! grep -qF .debug_info <<<"$(readelf -S "$lib")"; then
  # No types to compare: a symbol of the baseline that is gone breaks every program using it.
  want=$(grep -o "<elf-symbol name='[^']*'" "$baseline" | cut -d"'" -f2 | sort -u)
  have=$(cut -d@ -f1 <<<"$exported" | sort -u)
  gone=$(comm -23 <(echo "$want") <(echo "$have"))
  if [ -n "$gone" ]; then
    echo "abi: symbols of the $abi baseline missing from $lib:" >&2
    echo "$gone" >&2
    exit 1
  fi
  echo "abi: $lib has no debug information: symbols only, $(wc -l <<<"$want") of the baseline present"
  exit 0
fi

# Exit status bits: 4 an ABI change, 8 an incompatible one (a removed symbol); both fail.
rc=0
abidiff --no-added-syms --suppressions "$src/cmake/abi/dptrain.abignore" \
  --headers-dir2 "$src/include/dptrain" --drop-private-types "$baseline" "$lib" || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "abi: $lib differs from $baseline (abidiff exit $rc, report above). An intended change" >&2
  echo "abi: needs a new soname (the next minor version) and cmake/abi/update_baseline.sh" >&2
  exit 1
fi
echo "abi: $lib matches $baseline ($(wc -l <<<"$exported") symbols, version node DPTRAIN_$abi)"
