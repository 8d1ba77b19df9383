#!/usr/bin/env bash
# Builds the Debian packages of the build (cpack -G DEB), unpacks each into a scratch root
# (dpkg -x, no container, no root), and checks them: the expected packages and their
# dependencies, every file of `cmake --install` in some package, examples/ built against the
# unpacked packages through pkg-config and through CMake find_package, and one example run.
# Skips (77) without cpack, dpkg-deb or dpkg-shlibdeps (dpkg-dev).
# Usage: package_test.sh <build-dir> <source-dir> <scratch-dir> <c-compiler> [sanitizer flags]
set -euo pipefail
# `grep -q` reads captured output, never a pipe: it stops at the first match, and the writer's
# SIGPIPE would then fail the pipeline (pipefail).
build=$1 src=$2 scratch=$3 cc=$4 san=${5:-}
for t in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$t" >/dev/null || { echo "package: $t not found (apt-get install dpkg-dev)"; exit 77; }
done
fail() { echo "package: $*" >&2; exit 1; }
rm -rf "$scratch"
mkdir -p "$scratch"
ver=$(sed -n 's/^#define DPT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' \
  "$src/include/dptrain/version.h" | paste -sd.)
abi=$(objdump -p "$(readlink -f "$build/libdptrain.so")" | awk '$1 == "SONAME" {print $2}')
abi=${abi#libdptrain.so.}

(cd "$build" && cpack -G DEB -B "$scratch/debs") >"$scratch/cpack.log" 2>&1 ||
  { cat "$scratch/cpack.log" >&2; fail "cpack failed"; }
debs=$(cd "$scratch/debs" && ls -- *.deb)
want_pkgs=("libdptrain${abi}" libdptrain-dev)
[ ! -e "$build/tools/dptrain" ] || want_pkgs+=(dptrain)
for p in "${want_pkgs[@]}"; do
  grep -q "^${p}_${ver}_.*\.deb\$" <<<"$debs" || fail "no package $p $ver among: $debs"
done
field() { dpkg-deb -f "$scratch/debs/$1_${ver}_"*.deb "$2"; }
grep -qF "libdptrain${abi} (= ${ver})" <<<"$(field libdptrain-dev Depends)" ||
  fail "libdptrain-dev does not depend on libdptrain${abi} (= ${ver})"
for p in "libdptrain${abi}" "${want_pkgs[@]:2}"; do # dpkg-shlibdeps ran
  grep -qF 'libc6 (>=' <<<"$(field "$p" Depends)" || fail "$p: no libc6 in Depends (dpkg-shlibdeps)"
done
shlibs=$(dpkg-deb --ctrl-tarfile "$scratch/debs/libdptrain${abi}_${ver}_"*.deb | tar -xO ./shlibs)
[ "$shlibs" = "libdptrain ${abi} libdptrain${abi} (>= ${ver})" ] || fail "libdptrain${abi}: bad shlibs"

root="$scratch/root"
for d in "$scratch"/debs/*.deb; do dpkg-deb -x "$d" "$root"; done
# Every installed file is in a package (an install rule without a component is in none).
cmake --install "$build" --prefix "$scratch/plain/usr" >/dev/null
missing=$(cd "$scratch/plain" && find . ! -type d | while read -r f; do
  [ -e "$root/$f" ] || [ -L "$root/$f" ] || echo "$f"; done)
[ -z "$missing" ] || fail "installed but in no package: $missing"

pc=$(find "$root" -name dptrain.pc)
libdir=$(dirname "$(dirname "$pc")")
[ -e "$libdir/libdptrain.so.$abi" ] || fail "no $libdir/libdptrain.so.$abi"
# find_package(dptrain X) accepts the versions of this soname only (SameMinorVersion below 1.0).
# shellcheck disable=SC2016 # CMake's ${...}, not the shell's
printf '%s\n' 'string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _ "${PACKAGE_FIND_VERSION}")' \
  'set(PACKAGE_FIND_VERSION_MAJOR ${CMAKE_MATCH_1})' 'set(PACKAGE_FIND_VERSION_MINOR ${CMAKE_MATCH_2})' \
  "include(\"$(find "$root" -name dptrainConfigVersion.cmake)\")" \
  'message("${PACKAGE_VERSION_COMPATIBLE}")' >"$scratch/version_probe.cmake"
for req in "$abi:TRUE" "$ver:TRUE" "${abi%.*}.$((${abi##*.} + 1)):FALSE"; do
  got=$(cmake -DPACKAGE_FIND_VERSION="${req%%:*}" -P "$scratch/version_probe.cmake" 2>&1)
  [ "$got" = "${req##*:}" ] || fail "find_package(dptrain ${req%%:*}): compatible '$got', not ${req##*:}"
done
want='[[4, 5], [10, 11]]'
# examples/ through pkg-config.
mkdir -p "$scratch/pc"
for c in "$src"/examples/*.c; do
  # shellcheck disable=SC2046,SC2086 # flags split into words on purpose
  "$cc" $san -o "$scratch/pc/$(basename "$c" .c)" "$c" \
    $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs dptrain)
done
out=$(LD_LIBRARY_PATH="$libdir" "$scratch/pc/gemm_on_device" cpu | tail -n 1)
[ "$out" = "$want" ] || fail "gemm_on_device (pkg-config) printed '$out', not '$want'"
# examples/ through find_package, the packaged library found by the build's run path.
cmake -S "$src/examples" -B "$scratch/cm" -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >"$scratch/cm.log" 2>&1 ||
  { cat "$scratch/cm.log" >&2; fail "configuring examples/ against the packages failed"; }
cmake --build "$scratch/cm" >>"$scratch/cm.log" 2>&1 ||
  { cat "$scratch/cm.log" >&2; fail "building examples/ against the packages failed"; }
grep -qF "libdptrain.so.$abi => $libdir/" <<<"$(ldd "$scratch/cm/example_gemm_on_device")" ||
  fail "example_gemm_on_device (find_package) does not load the packaged libdptrain.so.$abi"
out=$("$scratch/cm/example_gemm_on_device" cpu | tail -n 1)
[ "$out" = "$want" ] || fail "gemm_on_device (find_package) printed '$out', not '$want'"
echo "package: $(wc -w <<<"$debs") packages of $ver; examples built by pkg-config and find_package; gemm ok"
