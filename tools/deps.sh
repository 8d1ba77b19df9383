#!/usr/bin/env bash
# Installs the Debian 12 packages dptrain builds, tests and runs with. Idempotent and quiet when
# everything is present; needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config check        # toolchain, Check unit tests
  universal-ctags clang-format                  # the house check (tools/check_house.sh)
  help2man                                      # the man page, made at build time
  libopenblas-dev                               # CPU backend gemm
  libdnnl-dev                                   # CPU backend convolutions (oneDNN)
  ocl-icd-opencl-dev opencl-headers libclblast-dev pocl-opencl-icd   # OpenCL + CPU driver
  libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers  # Vulkan + lavapipe
  libopenmpi-dev openmpi-bin openssh-client     # MPI transport (mpirun looks for ssh even on one node)
  oclgrind                                      # OpenCL kernel checker (tests)
  slurm-wlm                                     # a one-node Slurm: srun --mpi=pmix, sbatch requeue (tests)
  iproute2 procps                               # network namespaces and tc, pgrep (cluster.sh, chaos.sh)
  zlib1g-dev                                    # gzip IDX files
  libjansson-dev                                # JSON: model files, safetensors headers
  libutf8proc-dev                               # Unicode for the WordPiece tokenizer
  libturbojpeg0-dev libspng-dev                 # JPEG and PNG: dptrain data images
  dataset-fashion-mnist                         # the real data set
  fortunes                                      # English text for MLM pretraining (dptrain tokenize)
  python3-protobuf                              # reads TensorBoard event files back (tests)
  clang libclang-rt-14-dev                      # libFuzzer and the sanitizers (tools/fuzz.sh)
  dpkg-dev file lintian                         # Debian packages: cpack -G DEB, dpkg-shlibdeps
  abigail-tools                                 # ABI check against the stored baseline (abidiff)
  python3-dev python3-cffi python3-numpy        # the Python module (python/)
  python3-pip python3-setuptools python3-wheel  # its pip install (tests)
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "dptrain: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "dptrain: need root to install ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
