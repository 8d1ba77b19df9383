#!/usr/bin/env bash
# The Python module installed both ways: by CMake (`cmake --install`, the python component
# into lib/python3/dist-packages) and by pip (--no-build-isolation --no-index, offline, against
# that installed library through pkg-config); each trains the same tiny run to the same
# param_hash. Usage: install_test.sh <python3> <build dir> <python source dir> <scratch> [asan]
# asan: the sanitizer runtime to preload where the library was built with -fsanitize=address.
# Exit 77 (skipped) without NumPy, cffi, pip or venv in that python3.
set -uo pipefail
python=$1 build=$2 src=$3 scratch=$4 asan=${5:-}
pre=()
[ -z "$asan" ] || pre=(env "LD_PRELOAD=$asan" ASAN_OPTIONS=detect_leaks=0)
"$python" -c 'import numpy, cffi' 2>/dev/null ||
  { echo "SKIP: $python lacks numpy or cffi (python3-numpy python3-cffi)"; exit 77; }
"$python" -m pip --version >/dev/null 2>&1 && "$python" -c 'import venv, setuptools' 2>/dev/null ||
  { echo "SKIP: $python has no pip, venv or setuptools (python3-pip python3-setuptools)"; exit 77; }
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
prefix=$scratch/prefix
cmake --install "$build" --prefix "$prefix" >"$scratch/cmake-install.log" 2>&1 ||
  { cat "$scratch/cmake-install.log" >&2; echo "FAIL: cmake --install" >&2; exit 1; }
libdir=$(dirname "$(find "$prefix" -name 'libdptrain.so' | head -1)")
site=$prefix/lib/python3/dist-packages
[ -f "$site/dptrain/__init__.py" ] && ls "$site"/dptrain/_dptrain_cffi.*.so >/dev/null ||
  { echo "FAIL: no module in $site" >&2; exit 1; }

# pip, into a virtual environment that sees the system's cffi and NumPy (the dependencies, as
# Debian installs them); it builds in the source tree: a copy of it keeps the repository clean.
cp -r "$src" "$scratch/src" && rm -rf "$scratch/src/build" "$scratch/src"/*.egg-info
"$python" -m venv --without-pip --system-site-packages "$scratch/venv" || exit 1
PKG_CONFIG_PATH=$libdir/pkgconfig "$scratch/venv/bin/python" -m pip install \
  --no-build-isolation --no-index "$scratch/src" >"$scratch/pip.log" 2>&1 ||
  { cat "$scratch/pip.log" >&2; echo "FAIL: pip install" >&2; exit 1; }

run='import numpy as np, dptrain
rng = np.random.default_rng(0)
x = rng.integers(0, 256, (64, 8, 8)).astype(np.uint8)
y = (x.reshape(64, -1).mean(1) > 127).astype(np.int32)
m = dptrain.train(dptrain.mlp(hidden=(16,)), dptrain.Dataset.from_numpy(x, y, 2), backend="cpu",
                  global_batch=16, epochs=2, seed=1)
print(dptrain.__file__, f"{m.report.param_hash:016x}")'
a=$(cd / && PYTHONPATH=$site LD_LIBRARY_PATH=$libdir "${pre[@]}" "$python" -c "$run") ||
  { echo "FAIL: the CMake-installed module does not run" >&2; exit 1; }
b=$(cd / && "${pre[@]}" "$scratch/venv/bin/python" -c "$run") ||
  { echo "FAIL: the pip-installed module does not run (without LD_LIBRARY_PATH)" >&2; exit 1; }
echo "cmake: $a"
echo "pip:   $b"
case $a in "$site"/dptrain/*) ;; *) echo "FAIL: not the CMake-installed module" >&2; exit 1 ;; esac
case $b in "$scratch/venv"/*/dptrain/*) ;; *) echo "FAIL: not pip's module" >&2; exit 1 ;; esac
[ "${a##* }" = "${b##* }" ] || { echo "FAIL: the two modules' runs differ" >&2; exit 1; }
echo "ok: both installs train to param_hash ${a##* }"
