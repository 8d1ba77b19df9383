#!/usr/bin/env bash
# A GPU check in one run (at most 8 minutes on a machine with a GPU): builds dptrain (Release),
# lists the devices, runs the op conformance suite on every OpenCL and Vulkan device, bench gemm
# per backend next to cuBLAS where it is installed, ResNet-20 and BERT throughput per backend at
# 1 and 2 ranks, and the all-reduce from device buffers. One markdown file, a table per stage;
# every stage has its own time limit, a failed stage is recorded and the next one runs.
# docs/performance.md, "A GPU check", says what each table is.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/gpu-check.sh [options]
Builds dptrain (Release) and measures it on every OpenCL and Vulkan device found, into one
markdown file (a table per stage). Exit 0 when every stage run passed, 1 otherwise, 2 on usage.
  --out FILE      the results file (default gpu-check-results.md in the current directory)
  --build DIR     the build directory (default build-gpu-check); without the build stage,
                  the binaries already there are measured
  --deps          install the build's Debian packages first (tools/deps.sh; needs root),
                  outside the budget
  --quick         the fewest steps and smallest sizes, for CPU drivers (PoCL, lavapipe):
                  every stage runs, the figures only show that it does
  --stages LIST   stages to run, comma-separated, of build,conformance,gemm,train,allreduce
                  (default: all); the others get a section saying they were not run
  --backends LIST backends to measure, of cpu,opencl,vulkan (default: all present)
  --steps N       training steps per variant (default 3; --quick: 1)
  --budget S      seconds for the whole run (default 480; --quick: 900); each stage has a share
                  and gets the time earlier stages left unused
  -h, --help      this text
EOF
}

die_usage() {
  echo "gpu-check: $*" >&2
  echo "gpu-check: see bench/gpu-check.sh --help" >&2
  exit 2
}

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=gpu-check-results.md build=build-gpu-check deps=0 quick=0 steps="" budget=""
stages=build,conformance,gemm,train,allreduce backends=cpu,opencl,vulkan
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --out | --build | --stages | --backends | --steps | --budget)
      if [ $# -lt 2 ] || [ -z "$2" ]; then die_usage "$1 needs a value"; fi
      case $1 in
        --out) out=$2 ;; --build) build=$2 ;; --stages) stages=$2 ;;
        --backends) backends=$2 ;; --steps) steps=$2 ;; --budget) budget=$2 ;;
      esac
      shift 2 ;;
    --deps) deps=1; shift ;;
    --quick) quick=1; shift ;;
    *) die_usage "unknown option '$1'" ;;
  esac
done
all_stages=(build conformance gemm train allreduce)
for s in ${stages//,/ }; do
  [[ " ${all_stages[*]} " == *" $s "* ]] ||
    die_usage "unknown stage '$s' in --stages (build,conformance,gemm,train,allreduce)"
done
for b in ${backends//,/ }; do
  [[ " cpu opencl vulkan " == *" $b "* ]] ||
    die_usage "unknown backend '$b' in --backends (cpu,opencl,vulkan)"
done
[ -z "$steps" ] || [[ $steps =~ ^[1-9][0-9]{0,3}$ ]] || die_usage "--steps wants 1..9999"
[ -z "$budget" ] || [[ $budget =~ ^[1-9][0-9]{0,4}$ ]] || die_usage "--budget wants seconds"
command -v timeout >/dev/null || die_usage "needs the timeout command (coreutils)"
selected() { [[ ",$stages," == *",$1,"* ]]; }
wanted_backend() { [[ ",$backends," == *",$1,"* ]]; }

# Sizes of the run. Full: a GPU; --quick: CPU drivers, where ResNet-20 at batch 256 takes
# half a minute a step, so the batches shrink too (the figures are then no measurement).
if [ $quick = 1 ]; then
  steps=${steps:-1} budget=${budget:-900}
  gemm_sizes=128,256 gemm_repeat=2
  resnet_args=(--global-batch 8) bert_args=(--seq-len 16 --global-batch 4)
  ar_args=(--sizes 4K:1M --factor 16 --repeat 3)
  # Stage shares of the budget, seconds: build, conformance, gemm, train, allreduce.
  share=(420 90 40 280 60) run_cap=90
else
  steps=${steps:-3} budget=${budget:-480}
  gemm_sizes=256,512,1024,2048 gemm_repeat=10
  resnet_args=() bert_args=()
  ar_args=(--sizes 4K:64M --factor 4)
  share=(150 60 50 160 50) run_cap=45
fi

mkdir -p "$(dirname "$out")" "$build"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
build=$(cd "$build" && pwd)
bin=$build/tools/dptrain conformance=$build/tests/conformance
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'echo "gpu-check: stopped by a failure at line $LINENO of $0" >&2' ERR
start=$SECONDS
started=$(date -u '+%Y-%m-%d %H:%M UTC')

progress() { echo "gpu-check [$((SECONDS - start)) s]: $*"; }

# ---- time ---------------------------------------------------------------------------------
# Stage i may run until the sum of the shares up to it (capped by the budget): a stage that
# ends early leaves its time to the next ones, a hung one cannot take theirs.
stage_end=0 last_cap=0
begin_stage() {
  local i=$1 k end=0
  for ((k = 0; k <= i; k++)); do end=$((end + share[k])); done
  [ $end -le "$budget" ] || end=$budget
  stage_end=$((start + end))
}
# run_timed LOG CAP CMD...: CMD with its output in LOG, under `timeout` of at most CAP seconds
# and the stage's time left; 124 when it ran out of time, 125 when no time was left to start.
run_timed() {
  local log=$1 cap=$2 left
  shift 2
  left=$((stage_end - SECONDS))
  [ "$cap" -le "$left" ] || cap=$left
  if [ "$cap" -lt 3 ]; then
    echo "not run: the stage's time was spent" >"$log"
    return 125
  fi
  local rc=0
  last_cap=$cap
  timeout -k 5 "$cap" "$@" >"$log" 2>&1 </dev/null || rc=$?
  return $rc
}
# why RC: a word for a failed command's exit status.
why() {
  case $1 in
    124 | 137) echo "timed out after $last_cap s" ;;
    125) echo "not run: no time left" ;;
    *) echo "exit $1" ;;
  esac
}

# ---- the results file -----------------------------------------------------------------------
# Each stage writes $tmp/<stage>.md and its status; the file is rewritten after every stage, so
# an interrupted run still leaves what it measured.
declare -A status
for s in "${all_stages[@]}"; do
  status[$s]="not run (not in --stages)"
  printf '' >"$tmp/$s.md"
done
printf '' >"$tmp/devices.md"
header_devices="none listed (no dptrain binary)"
render() {
  local bad=() s
  for s in "${all_stages[@]}"; do [[ ${status[$s]} != FAILED* ]] || bad+=("$s"); done
  {
    echo "# dptrain GPU check"
    echo
    echo "- Devices: $header_devices"
    echo "- GPU (nvidia-smi): $gpu_line"
    echo "- Commit: $commit; run $started"
    echo "- Host: $(uname -a)"
    echo "- CPU: $cpu_model, $(nproc) cores"
    if [ $quick = 1 ]; then
      echo "- Mode: --quick (1 step, small batches and sizes): it shows every stage runs; its"
      echo "  figures are no measurement"
    else
      echo "- Mode: full ($steps training steps per variant)"
    fi
    echo "- Ranks: 2 ranks are 2 processes on this machine (mpirun -np 2); with one GPU both"
    echo "  ranks share it"
    if [ ${#bad[@]} -eq 0 ]; then
      echo "- Result: no stage failed"
    else
      echo "- Result: FAILED: ${bad[*]}"
    fi
    section "Build" build
    echo
    echo "## Devices"
    echo
    cat "$tmp/devices.md"
    section "Conformance" conformance
    section "gemm" gemm
    section "Training throughput" train
    section "All-reduce from device buffers" allreduce
  } >"$out.part"
  mv "$out.part" "$out"
}
section() {
  echo
  echo "## $1"
  echo
  echo "Status: ${status[$2]}"
  if [ -s "$tmp/$2.md" ]; then
    echo
    cat "$tmp/$2.md"
  fi
}
# tail_block LOG: the last lines of a failed command's output, as a code block.
tail_block() {
  echo
  echo '```'
  if [ -s "$1" ]; then tail -n 15 "$1" | cut -c1-200; else echo "(no output)"; fi
  echo '```'
}

commit="not a git checkout"
if git -C "$src" rev-parse --short HEAD >/dev/null 2>&1; then
  commit=$(git -C "$src" rev-parse --short HEAD)
  [ -z "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ] ||
    commit="$commit (with local changes)"
fi
cpu_model=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
[ -n "$cpu_model" ] || cpu_model=$(uname -m)
gpu_line="none (no nvidia-smi)"
if command -v nvidia-smi >/dev/null; then
  gpu_line=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader 2>/dev/null | paste -sd ';' - || true)
  [ -n "$gpu_line" ] || gpu_line="nvidia-smi found no GPU"
fi
render
progress "results go to $out"

# ---- stage 1: build -------------------------------------------------------------------------
# The packages (--deps) come first, outside the budget: apt's time is the network's, and a
# timeout inside dpkg would leave the machine worse off.
ok=1 build_rows=""
if [ $deps = 1 ]; then
  progress "deps: tools/deps.sh (not counted in the budget)"
  t0=$SECONDS rc=0
  timeout -k 10 1200 bash "$src/tools/deps.sh" >"$tmp/deps.log" 2>&1 </dev/null || rc=$?
  [ $rc = 0 ] && r=passed || { r="FAILED ($(why $rc))"; ok=0; }
  build_rows="| tools/deps.sh | $r | $((SECONDS - t0)) |"$'\n'
  [ $ok = 1 ] || { status[build]=FAILED; build_rows+=$(tail_block "$tmp/deps.log")$'\n'; }
  start=$((start + SECONDS - t0))
  progress "deps: $r"
fi
begin_stage 0
if selected build && [ $ok = 1 ]; then
  progress "build: Release into $build"
  t0=$SECONDS rc=0
  run_timed "$tmp/build.log" "${share[0]}" env DPT_BUILD_DIR="$build" \
    bash "$src/tools/build.sh" -DCMAKE_BUILD_TYPE=Release || rc=$?
  summary=$(grep -m1 '^-- dptrain' "$tmp/build.log" | sed 's/^-- //' || true)
  [ $rc = 0 ] && r="passed: ${summary:-built}" || { r="FAILED ($(why $rc))"; ok=0; }
  build_rows+="| tools/build.sh -DCMAKE_BUILD_TYPE=Release | $r | $((SECONDS - t0)) |"$'\n'
  [ $ok = 1 ] || build_rows+=$(tail_block "$tmp/build.log")$'\n'
  [ $ok = 1 ] && status[build]=passed || status[build]=FAILED
  progress "build: ${status[build]}"
elif [ -x "$bin" ] && [ $ok = 1 ]; then
  build_rows+="| (no build: the binaries already in $build) | | |"$'\n'
fi
if [ -n "$build_rows" ]; then
  printf '| step | result | seconds |\n| --- | --- | --- |\n%s' "$build_rows" >"$tmp/build.md"
fi

# ---- devices --------------------------------------------------------------------------------
# `dptrain devices`: "<backend>:<index>  <type>  <name>  (<vendor>, <memory>, <driver>)", or
# "<backend>  -  <why not>".
gpu_devs=() # opencl:0 vulkan:0 ...
have_backend() { [[ " ${present[*]} " == *" $1 "* ]]; }
present=()
mpi=0 mpirun=""
if [ -x "$bin" ]; then
  timeout 30 "$bin" devices >"$tmp/devices.log" 2>&1 || true
  {
    echo "\`dptrain devices\`:"
    echo
    echo "| device | type | name | vendor, memory, driver |"
    echo "| --- | --- | --- | --- |"
    awk '{
      id = $1; type = $2; rest = $0
      sub(/^[^ ]+ +[^ ]+ +/, "", rest)
      name = rest; detail = ""
      if ((i = index(rest, "  (")) > 0) {
        name = substr(rest, 1, i - 1); detail = substr(rest, i + 3); sub(/\)$/, "", detail)
      }
      if (type == "-") { name = ""; detail = rest; type = "" }
      gsub(/\|/, "\\|", name); gsub(/\|/, "\\|", detail)
      printf "| %s | %s | %s | %s |\n", id, type, name, detail
    }' "$tmp/devices.log"
  } >"$tmp/devices.md"
  while read -r id _; do
    b=${id%%:*}
    [[ $id =~ ^(cpu|opencl|vulkan):[0-9]+$ ]] || continue
    wanted_backend "$b" || continue
    have_backend "$b" || present+=("$b")
    [ "$b" = cpu ] || gpu_devs+=("$id")
  done <"$tmp/devices.log"
  header_devices=$(awk '$1 ~ /^(opencl|vulkan):[0-9]+$/ {
      rest = $0; sub(/^[^ ]+ +[^ ]+ +/, "", rest); sub(/  \(.*$/, "", rest)
      printf "%s%s %s (%s)", n++ ? "; " : "", $1, rest, $2 }' "$tmp/devices.log")
  [ -n "$header_devices" ] || header_devices="no OpenCL or Vulkan device"
  if ! awk '$1 ~ /^(opencl|vulkan):/ && $2 != "cpu" { f = 1 } END { exit !f }' \
    "$tmp/devices.log"; then
    header_devices="$header_devices; CPU drivers only: no GPU figures here"
  fi
  cache=$build/CMakeCache.txt
  if grep -q '^DPT_WITH_MPI:BOOL=ON' "$cache" 2>/dev/null; then
    mpirun=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$cache")
    [ -x "$mpirun" ] || mpirun=$(command -v mpirun || true)
    [ -z "$mpirun" ] || mpi=1
  fi
else
  echo "No $bin: nothing to measure." >"$tmp/devices.md"
fi
progress "devices: $header_devices"
render

# Threads per rank: the cores shared out (PoCL, lavapipe and OpenBLAS each start a thread per
# core otherwise), unless already set.
thread_env() {
  local ranks=$1 n
  n=$(($(nproc) / ranks))
  [ $n -ge 1 ] || n=1
  echo "OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$n}" \
    "POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-$n}" "LP_NUM_THREADS=${LP_NUM_THREADS:-$n}"
}
# 2 ranks: Open MPI gets --oversubscribe and no core binding, so that each rank's threads
# spread over the cores.
mpi2=()
if [ $mpi = 1 ]; then
  mpi2=("$mpirun" -np 2)
  if "$mpirun" --version 2>/dev/null | grep -qi 'open mpi'; then
    mpi2+=(--oversubscribe --bind-to none)
  fi
fi

# ---- stage 2: conformance -------------------------------------------------------------------
begin_stage 1
if selected conformance; then
  if [ ! -x "$conformance" ]; then
    status[conformance]="FAILED: no $conformance (built with DPT_BUILD_TESTS=ON?)"
  elif [ ${#gpu_devs[@]} -eq 0 ]; then
    status[conformance]="FAILED: no OpenCL or Vulkan device"
  else
    {
      echo "\`tests/conformance <backend> <index>\`: every op against the CPU reference."
      echo
      echo "| device | result | checks | seconds |"
      echo "| --- | --- | --- | --- |"
    } >"$tmp/conformance.md"
    failed=0 tails=""
    layer=0
    vk_dirs=${VK_LAYER_PATH:-}
    for d in ${vk_dirs//:/ } /usr/share/vulkan/explicit_layer.d \
      /usr/local/share/vulkan/explicit_layer.d /etc/vulkan/explicit_layer.d; do
      [ -n "$d" ] && [ -f "$d/VkLayer_khronos_validation.json" ] && layer=1
    done
    for id in "${gpu_devs[@]}"; do
      b=${id%%:*} i=${id#*:} env_=()
      if [ "$b" = vulkan ]; then env_=("DPT_VULKAN_VALIDATION=$layer"); fi
      progress "conformance: $id"
      t0=$SECONDS rc=0 log=$tmp/conf-$b-$i.log
      # shellcheck disable=SC2046
      run_timed "$log" "$run_cap" env $(thread_env 1) "${env_[@]}" "$conformance" "$b" "$i" ||
        rc=$?
      checks=$(grep -m1 -o 'Checks: [0-9]*, Failures: [0-9]*, Errors: [0-9]*' "$log" || true)
      if [ $rc = 0 ]; then
        r=passed
      else
        r="FAILED ($(why $rc))" failed=1
        [ $rc = 125 ] || tails+="$id:$(tail_block "$log")"$'\n\n'
      fi
      [ "$b" != vulkan ] || [ $layer = 1 ] || r="$r, no validation layer"
      echo "| $id | $r | ${checks:--} | $((SECONDS - t0)) |" >>"$tmp/conformance.md"
    done
    if [ -n "$tails" ]; then
      printf '\nThe end of each failed run:\n\n%s' "$tails" >>"$tmp/conformance.md"
    fi
    [ $failed = 0 ] && status[conformance]=passed || status[conformance]=FAILED
  fi
  progress "conformance: ${status[conformance]}"
  render
fi

# ---- stage 3: gemm, and cuBLAS where installed ----------------------------------------------
# cuBLAS is built only where nvidia-smi runs and its header and library are found (nvcc's CUDA
# or the usual places); the program is bench/gpu-check/cublas_sgemm.c, not the library.
find_cublas() {
  local roots=() r
  [ -z "${CUDA_HOME:-}" ] || roots+=("$CUDA_HOME")
  [ -z "${CUDA_PATH:-}" ] || roots+=("$CUDA_PATH")
  if command -v nvcc >/dev/null; then roots+=("$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)"); fi
  roots+=(/usr/local/cuda /usr)
  for r in "${roots[@]}"; do
    local inc="" lib="" d
    for d in "$r/include" "$r/targets/x86_64-linux/include" "$r/targets/sbsa-linux/include"; do
      [ -f "$d/cublas_v2.h" ] && [ -f "$d/cuda_runtime.h" ] && { inc=$d; break; }
    done
    for d in "$r/lib64" "$r/lib" "$r/lib/x86_64-linux-gnu" "$r/lib/aarch64-linux-gnu" \
      "$r/targets/x86_64-linux/lib"; do
      [ -e "$d/libcublas.so" ] && [ -e "$d/libcudart.so" ] && { lib=$d; break; }
    done
    if [ -n "$inc" ] && [ -n "$lib" ]; then
      echo "$inc $lib"
      return 0
    fi
  done
  return 1
}

begin_stage 2
if selected gemm; then
  if [ ! -x "$bin" ]; then
    status[gemm]="FAILED: no $bin"
  else
    failed=0 notes="" rows=$tmp/gemm.tsv
    : >"$rows"
    for b in cpu opencl vulkan; do
      have_backend "$b" || continue
      progress "gemm: $b"
      rc=0 log=$tmp/gemm-$b.log
      # shellcheck disable=SC2046
      run_timed "$log" "$run_cap" env $(thread_env 1) "$bin" bench gemm --backends "$b" \
        --sizes "$gemm_sizes" --repeat "$gemm_repeat" || rc=$?
      # The table: a header "n <label>...", then "n <GFLOP/s>..." rows up to "devices:".
      awk -v OFS='\t' '/^devices:/ { exit } $1 == "n" { for (i = 2; i <= NF; i++) l[i] = $i; h = 1; next }
        h && $1 ~ /^[0-9]+$/ { for (i = 2; i <= NF; i++) print $1, l[i], $i }' "$log" >>"$rows"
      if [ $rc != 0 ] || grep -q ' failed' "$log"; then
        failed=1
        notes+="$b: FAILED ($(why $rc))"
        [ $rc = 125 ] || notes+=$(tail_block "$log")
        notes+=$'\n\n'
      fi
    done
    cublas="" cs_args=(--sizes "$gemm_sizes" --repeat "$gemm_repeat")
    if ! command -v nvidia-smi >/dev/null; then
      cublas="cuBLAS: not run: no nvidia-smi (no NVIDIA GPU)"
    elif ! timeout 20 nvidia-smi -L >/dev/null 2>&1; then
      cublas="cuBLAS: not run: nvidia-smi lists no GPU"
    elif ! paths=$(find_cublas); then
      cublas="cuBLAS: not run: cublas_v2.h, cuda_runtime.h, libcublas.so or libcudart.so not found"
    else
      read -r inc lib <<<"$paths"
      progress "gemm: cuBLAS ($inc, $lib)"
      exe=$tmp/cublas_sgemm rc=0
      if command -v nvcc >/dev/null; then
        cc_cmd=(nvcc -O2 -x c) rpath=(-Xlinker -rpath -Xlinker "$lib")
      else
        cc_cmd=(cc -O2 -std=c11) rpath=("-Wl,-rpath,$lib")
      fi
      run_timed "$tmp/cublas-cc.log" 60 "${cc_cmd[@]}" -I"$inc" \
        "$src/bench/gpu-check/cublas_sgemm.c" -o "$exe" -L"$lib" "${rpath[@]}" -lcublas \
        -lcudart || rc=$?
      if [ $rc != 0 ]; then
        failed=1
        cublas="cuBLAS: FAILED to build with ${cc_cmd[0]} ($(why $rc))$(tail_block "$tmp/cublas-cc.log")"
      else
        rc=0
        run_timed "$tmp/cublas.log" "$run_cap" "$exe" "${cs_args[@]}" || rc=$?
        awk -v OFS='\t' '$1 ~ /^[0-9]+$/ { print $1, "cuBLAS", $2 }' "$tmp/cublas.log" >>"$rows"
        dev=$(sed -n 's/^# device: //p' "$tmp/cublas.log")
        if [ $rc = 0 ]; then
          cublas="cuBLAS: cublasSgemm on ${dev:-device 0} (built with ${cc_cmd[0]}), default math mode"
        else
          failed=1
          cublas="cuBLAS: FAILED ($(why $rc))$(tail_block "$tmp/cublas.log")"
        fi
      fi
    fi
    {
      echo "GFLOP/s of C = A*B, float32, n x n, median of $gemm_repeat after a warm-up"
      echo "(\`dptrain bench gemm --backends B --sizes $gemm_sizes --repeat $gemm_repeat\`):"
      echo
      # Pivot: one row per n, a column per label in the order first seen.
      awk -F'\t' '{ if (!($2 in seen)) { seen[$2] = 1; col[++nc] = $2 }
                    if (!($1 in rs)) { rs[$1] = 1; row[++nr] = $1 }
                    v[$1, $2] = $3 }
        END {
          if (!nc) { print "(no figures)"; exit }
          printf "| n |"; for (c = 1; c <= nc; c++) printf " %s |", col[c]; print ""
          printf "| --- |"; for (c = 1; c <= nc; c++) printf " --- |"; print ""
          for (r = 1; r <= nr; r++) {
            printf "| %s |", row[r]
            for (c = 1; c <= nc; c++) printf " %s |", ((row[r], col[c]) in v) ? v[row[r], col[c]] : "-"
            print ""
          }
        }' "$rows"
      echo
      echo "$cublas"
      [ -z "$notes" ] || printf '\n%s' "$notes"
    } >"$tmp/gemm.md"
    [ $failed = 0 ] && status[gemm]=passed || status[gemm]=FAILED
  fi
  progress "gemm: ${status[gemm]}"
  render
fi

# ---- stage 4: training throughput -----------------------------------------------------------
# json_num KEY LINE: a number of bench train's one-line JSON.
json_num() { { grep -o "\"$1\": [-0-9.e+]*" <<<"$2" || true; } | awk 'NR == 1 { print $2 }'; }

begin_stage 3
if selected train; then
  if [ ! -x "$bin" ]; then
    status[train]="FAILED: no $bin"
  else
    failed=0 tails=""
    {
      echo "\`dptrain bench train --model M --backend B --steps $steps --repeat 1 --json\`" \
        "${resnet_args[*]:+(ResNet: ${resnet_args[*]}) }${bert_args[*]:+(BERT: ${bert_args[*]})}"
      echo "1 rank: \`--replicas 1\`; 2 ranks: under \`mpirun -np 2\`. samples/s: the sharded"
      echo "step (the default); full step: the step of \`dptrain train --full-step\`; speedup: 2"
      echo "ranks over rank 0 alone in the same run. Each backend's device 0 (GPUs come before"
      echo "CPU drivers). Threads: 1 rank $(thread_env 1); 2 ranks"
      echo "$(thread_env 2) per rank."
      echo
      echo "| model | backend | ranks | samples/s | tokens/s | full step samples/s | speedup | result |"
      echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    } >"$tmp/train.md"
    for model in resnet bert; do
      for b in cpu opencl vulkan; do
        have_backend "$b" || continue
        for ranks in 1 2; do
          if [ $ranks = 2 ] && [ $mpi = 0 ]; then
            echo "| $model | $b | 2 | | | | | not run: no MPI in this build |" >>"$tmp/train.md"
            continue
          fi
          progress "train: $model on $b, $ranks rank(s)"
          margs=("${resnet_args[@]}")
          [ $model = resnet ] || margs=("${bert_args[@]}")
          cmd=("$bin" bench train --model "$model" --backend "$b" --steps "$steps" --repeat 1
            --json "${margs[@]}")
          rc=0 log=$tmp/train-$model-$b-$ranks.log
          # shellcheck disable=SC2046
          if [ $ranks = 1 ]; then
            run_timed "$log" "$run_cap" env $(thread_env 1) "${cmd[@]}" --replicas 1 || rc=$?
          else
            run_timed "$log" "$run_cap" env $(thread_env 2) "${mpi2[@]}" "${cmd[@]}" || rc=$?
          fi
          line=$(grep -m1 '^{"model"' "$log" || true)
          if [ $rc = 0 ] && [ -n "$line" ]; then
            name=$(sed 's/^{"model": "\([^"]*\)".*/\1/' <<<"$line")
            sps=$(json_num replicas_samples_per_sec "$line")
            tps=$(json_num replicas_tokens_per_sec "$line")
            full=$(json_num full_step_samples_per_sec "$line")
            sp=$(json_num speedup "$line")
            [ $ranks = 2 ] || sp=""
            batch=$(json_num global_batch "$line")
            echo "| $name, batch $batch | $b | $ranks | $sps | ${tps:--} | $full | ${sp:--} | passed |" \
              >>"$tmp/train.md"
          else
            failed=1
            echo "| $model | $b | $ranks | | | | | FAILED ($(why $rc)) |" >>"$tmp/train.md"
            [ $rc = 125 ] || tails+="$model, $b, $ranks rank(s):$(tail_block "$log")"$'\n\n'
          fi
        done
      done
    done
    [ -z "$tails" ] || printf '\nThe end of each failed run:\n\n%s' "$tails" >>"$tmp/train.md"
    [ $failed = 0 ] && status[train]=passed || status[train]=FAILED
  fi
  progress "train: ${status[train]}"
  render
fi

# ---- stage 5: all-reduce from device buffers ------------------------------------------------
begin_stage 4
if selected allreduce; then
  if [ ! -x "$bin" ]; then
    status[allreduce]="FAILED: no $bin"
  elif [ $mpi = 0 ]; then
    status[allreduce]="FAILED: this build has no MPI (or no mpirun)"
  elif [ ${#gpu_devs[@]} -eq 0 ]; then
    status[allreduce]="FAILED: no OpenCL or Vulkan device"
  else
    failed=0 tails="" table=$tmp/ar.tsv
    : >"$table"
    notes=""
    for b in opencl vulkan; do
      have_backend "$b" || continue
      progress "allreduce: --buffer $b, 2 ranks"
      rc=0 log=$tmp/allreduce-$b.log
      # shellcheck disable=SC2046
      run_timed "$log" "$run_cap" env $(thread_env 2) "${mpi2[@]}" "$bin" bench allreduce \
        --buffer "$b" "${ar_args[@]}" || rc=$?
      # The table: a header "bytes algo dpt_us ...", then a row per size.
      awk -v b="$b" '$1 == "bytes" { h = 1; next }
        h && $1 ~ /^[0-9]+$/ { $1 = $1; gsub(/ /, " | "); print "| " b " | " $0 " |" }' \
        "$log" >>"$table"
      [ -s "$table.hdr" ] || grep -m1 '^ *bytes ' "$log" >"$table.hdr" || true
      mc=$(sed -n 's/^# memcpy, one core, 64 MiB: \([0-9.]*\) GB.*/\1/p' "$log")
      [ -z "$mc" ] || notes+="$b run: memcpy on one core $mc GB/s. "
      if [ $rc != 0 ]; then
        failed=1
        tails+="--buffer $b: FAILED ($(why $rc))"
        [ $rc = 125 ] || tails+=$(tail_block "$log")
        tails+=$'\n\n'
      fi
    done
    {
      echo "\`mpirun -np 2 dptrain bench allreduce --buffer B ${ar_args[*]}\`: float32, times in"
      echo "us (the slowest rank's median), busbw in GB/s; mpi_us: download, MPI_Allreduce,"
      echo "upload of the same data; ratio = mpi_us / dpt_us; device 0 of the backend. $notes"
      echo
      if [ -s "$table" ]; then
        read -r -a cols <"$table.hdr"
        printf '| buffer |'; printf ' %s |' "${cols[@]}"; echo
        printf '| --- |'; printf ' --- |%.0s' "${cols[@]}"; echo
        cat "$table"
      else
        echo "(no figures)"
      fi
      [ -z "$tails" ] || printf '\nThe end of each failed run:\n\n%s' "$tails"
    } >"$tmp/allreduce.md"
    [ $failed = 0 ] && status[allreduce]=passed || status[allreduce]=FAILED
  fi
  progress "allreduce: ${status[allreduce]}"
  render
fi

render
rc=0
for s in "${all_stages[@]}"; do [[ ${status[$s]} != FAILED* ]] || rc=1; done
progress "done ($([ $rc = 0 ] && echo "no stage failed" || echo "a stage FAILED")): $out"
exit $rc
