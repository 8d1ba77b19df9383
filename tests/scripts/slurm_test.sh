#!/usr/bin/env bash
# dptrain under a real Slurm: a one-node cluster of Debian's slurm-wlm (slurmctld and slurmd
# started here, as root, from a generated slurm.conf in the scratch directory; stopped at the
# end whatever happens), then
#   a. srun -n 2 --mpi=pmix trains to the same final param_hash as mpiexec -np 2;
#   b. srun -n 2 --mpi=none is refused with exit 2, naming both counts and the fix;
#   c. examples/slurm/train.sbatch (the script docs/slurm.md shows) is stopped by SIGUSR1 from
#      `scancel --signal=USR1` once it has written a checkpoint (a stand-in for its
#      --signal=USR1@120: Slurm's shortest time limit is a minute), exits 75, requeues itself,
#      and its second run resumes from the checkpoint at a step > 0 and finishes.
# First, everywhere: the script docs/slurm.md shows is the file itself. Then skipped (exit 77,
# saying why) without root, slurm-wlm, its PMIx plugin or mpiexec, or when the daemons do not
# come up. A requeued job waits cred_expire seconds before it runs again (120 by default), then
# for the scheduler's next pass (60 s by default): this cluster sets 5 s and 1 s.
# With tools/cluster.sh as a sixth argument: the same Slurm over two nodes (network namespaces,
# a slurmd in each), and d. srun -N 2 -n 4 --mpi=pmix trains as mpiexec's 2 nodes of 2 ranks.
# Usage: slurm_test.sh <dptrain> <scratch dir> <mpiexec> <sbatch script> <docs/slurm.md>
#                      [<tools/cluster.sh>]
set -uo pipefail
dptrain=$1 scratch=$2 mpiexec=$3 script=$4 doc=$5 cluster=${6:-}
skip() {
  echo "SKIP: $*"
  exit 77
}
# The page's first bash block against the file.
if ! awk '/^```bash$/ { f = 1; next } /^```$/ { if (f) exit } f' "$doc" | diff - "$script"; then
  echo "FAIL: $doc shows another script than $script (diff above)" >&2
  exit 1
fi
[ -n "$mpiexec" ] || skip "no mpiexec"
[ "$(id -u)" -eq 0 ] || skip "not root (slurmd must start tasks as any user)"
for c in slurmctld slurmd srun sbatch scontrol scancel sinfo ss; do
  command -v "$c" >/dev/null || skip "no $c (apt-get install slurm-wlm)"
done
rm -rf "$scratch" && mkdir -p "$scratch/state" "$scratch/spool" || exit 1
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
failures=0
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

# ---- the cluster --------------------------------------------------------------------------------
# Whatever Slurm job this test may itself run in is not the one it starts.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^SLURM_')
export SLURM_CONF=$scratch/slurm.conf

# free_port: a TCP port nobody listens on.
free_port() {
  local p
  for p in $(shuf -i 20000-59999 -n 200); do
    [ -z "$(ss -Hltn "sport = :$p")" ] && { echo "$p"; return; }
  done
}
ctld_port=$(free_port) slurmd_port=$(free_port)
[ "$ctld_port" != "$slurmd_port" ] || slurmd_port=$((ctld_port + 1))
cpus=$(nproc)
[ "$cpus" -ge 2 ] || cpus=2 # two tasks a node; config_overrides lets slurmd accept more
if [ -n "$cluster" ]; then
  # Two nodes as network namespaces (tools/cluster.sh): slurmctld in the bridge's namespace,
  # a slurmd in each node's, each with a /tmp of its own (PMIx's per-step directories there
  # would collide); the clients run in the bridge's namespace.
  case $scratch in /tmp/*) skip "the scratch directory is under /tmp, which each node hides" ;; esac
  command -v nsenter >/dev/null && command -v unshare >/dev/null || skip "no nsenter or unshare"
  export DPT_CLUSTER_PREFIX=dptsl DPT_CLUSTER_SUBNET=10.233.0
  bash "$cluster" up 2 >"$scratch/cluster.out" 2>&1 ||
    { cat "$scratch/cluster.out"; bash "$cluster" down; skip "no network namespaces here"; }
  brns=${DPT_CLUSTER_PREFIX}br ctld_host=${DPT_CLUSTER_PREFIX}head ctld_addr=$DPT_CLUSTER_SUBNET.1
  nodes=("${DPT_CLUSTER_PREFIX}n1" "${DPT_CLUSTER_PREFIX}n2")
  addrs=("$DPT_CLUSTER_SUBNET.11" "$DPT_CLUSTER_SUBNET.12")
  sl() { nsenter --net="/var/run/netns/$brns" "$@"; }
else
  ctld_host=$(hostname) ctld_addr=127.0.0.1 nodes=("$(hostname)") addrs=(127.0.0.1)
  sl() { "$@"; }
fi
{
  cat <<EOF
ClusterName=dptest
SlurmctldHost=$ctld_host($ctld_addr)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
AuthInfo=cred_expire=5
StateSaveLocation=$scratch/state
SlurmdSpoolDir=$scratch/spool-%n
SlurmctldPidFile=$scratch/slurmctld.pid
SlurmdPidFile=$scratch/slurmd-%n.pid
SlurmctldLogFile=$scratch/slurmctld.log
SlurmdLogFile=$scratch/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_interval=1,bf_interval=1
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
EOF
  for k in "${!nodes[@]}"; do
    echo "NodeName=${nodes[$k]} NodeAddr=${addrs[$k]} CPUs=$cpus RealMemory=256 State=UNKNOWN"
    mkdir -p "$scratch/spool-${nodes[$k]}"
  done
  echo "PartitionName=test Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP"
} >"$SLURM_CONF"

daemons=() jobs=()
stop_cluster() {
  [ ${#jobs[@]} -gt 0 ] && sl scancel "${jobs[@]}" 2>/dev/null
  local i=0 p
  while [ $i -lt 50 ] && [ -n "$(sl squeue -h 2>/dev/null)" ]; do
    sleep 0.2
    i=$((i + 1))
  done
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${daemons[@]}"; do wait "$p" 2>/dev/null; done
  [ -z "$cluster" ] || bash "$cluster" down
}
trap stop_cluster EXIT

if [ -n "$cluster" ]; then
  sl unshare --uts sh -c 'hostname "$0" && exec slurmctld -D -f "$SLURM_CONF"' "$ctld_host" \
    >"$scratch/slurmctld.out" 2>&1 &
  daemons+=($!)
  for n in "${nodes[@]}"; do
    nsenter --net="/var/run/netns/$n" unshare --mount --uts sh -c \
      'mount -t tmpfs tmpfs /tmp && hostname "$0" && exec slurmd -D -f "$SLURM_CONF" -N "$0"' \
      "$n" >"$scratch/slurmd-$n.out" 2>&1 &
    daemons+=($!)
  done
else
  slurmctld -D -f "$SLURM_CONF" >"$scratch/slurmctld.out" 2>&1 &
  daemons+=($!)
  slurmd -D -f "$SLURM_CONF" -N "${nodes[0]}" >"$scratch/slurmd-${nodes[0]}.out" 2>&1 &
  daemons+=($!)
fi
# Every node idle within 30 s, else the daemons could not start here (a container without the
# privileges, a port taken meanwhile): skipped, with their last words.
state="" i=0 alive=1
while [ $i -lt 150 ] && [ $alive = 1 ]; do
  state=$(sl sinfo -h -o %t 2>/dev/null | sort -u | tr '\n' ' ')
  [ "$state" = "idle " ] && break
  for p in "${daemons[@]}"; do kill -0 "$p" 2>/dev/null || alive=0; done
  sleep 0.2
  i=$((i + 1))
done
if [ "$state" != "idle " ]; then
  tail -n 3 "$scratch"/slurm*.log "$scratch"/slurm*.out 2>/dev/null
  skip "the Slurm daemons did not come up (node state '${state:-none}'; logs above)"
fi
sl srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no PMIx plugin (srun --mpi=list)"
echo "ok: Slurm up (${nodes[*]}, ports $ctld_port and $slurmd_port, $cpus CPUs each) [${SECONDS} s]"

# ---- the runs -----------------------------------------------------------------------------------
data="$scratch/data"
make_idx "$data" train 320
make_idx "$data" t10k 40
hash_of() { grep '"final"' "$1" | sed 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/' | sort -u; }
run=(train --backend cpu --data "$data" --hidden 64 --epochs 2 --global-batch 32 --seed 5
  --quiet --json)

# d. (two nodes) srun's ranks over two nodes, two on each, train as mpiexec's four ranks told
# that every two of them are a node (DPT_COMM_FAKE_NODES=2: the same hierarchical exchange).
if [ -n "$cluster" ]; then
  DPT_COMM_FAKE_NODES=2 $mpiexec -np 4 "$dptrain" "${run[@]}" >"$scratch/mpi4.json" \
    2>"$scratch/mpi4.err" || fail "mpiexec -np 4: $(tail -n 2 "$scratch/mpi4.err")"
  timeout 120 nsenter --net="/var/run/netns/$brns" srun -N 2 -n 4 --mpi=pmix "$dptrain" \
    "${run[@]}" >"$scratch/srun4.json" 2>"$scratch/srun4.err" ||
    fail "srun -N 2 -n 4 --mpi=pmix: $(tail -n 2 "$scratch/srun4.err")"
  ref=$(hash_of "$scratch/mpi4.json") got=$(hash_of "$scratch/srun4.json")
  if [ -n "$ref" ] && [ "$got" = "$ref" ] && grep -q '"final".*"ranks": 4,' "$scratch/srun4.json"; then
    echo "ok: srun -N 2 -n 4 --mpi=pmix: param_hash $got, as mpiexec's 2 nodes of 2 [${SECONDS} s]"
  else
    fail "srun -N 2 -n 4 --mpi=pmix: param_hash '$got', mpiexec's '$ref'"
  fi
  [ $failures -eq 0 ] && echo "slurm (two nodes): all passed"
  exit $((failures > 0))
fi

# a. srun's ranks are MPI's ranks: the same training as mpiexec's, bit for bit.
$mpiexec -np 2 "$dptrain" "${run[@]}" >"$scratch/mpi.json" 2>"$scratch/mpi.err" ||
  fail "mpiexec -np 2: $(tail -n 2 "$scratch/mpi.err")"
timeout 120 srun -n 2 --mpi=pmix "$dptrain" "${run[@]}" >"$scratch/srun.json" \
  2>"$scratch/srun.err" || fail "srun -n 2 --mpi=pmix: $(tail -n 2 "$scratch/srun.err")"
ref=$(hash_of "$scratch/mpi.json") got=$(hash_of "$scratch/srun.json")
if [ -n "$ref" ] && [ "$got" = "$ref" ] && grep -q '"final".*"ranks": 2,' "$scratch/srun.json"; then
  echo "ok: srun --mpi=pmix: param_hash $got, as mpiexec -np 2 [${SECONDS} s]"
else
  fail "srun --mpi=pmix: param_hash '$got', mpiexec's '$ref'"
fi

# b. Without MPI's process information each task would train alone: refused, naming the fix.
timeout 120 srun -n 2 --mpi=none "$dptrain" "${run[@]}" >/dev/null 2>"$scratch/none.err"
rc=$?
if [ $rc -eq 2 ] &&
  grep -q "Slurm started 2 tasks in this step .* but MPI sees 1 rank.*srun --mpi=pmix" \
    "$scratch/none.err"; then
  echo "ok: srun --mpi=none refused: $(head -n 1 "$scratch/none.err") [${SECONDS} s]"
else
  fail "srun --mpi=none: exit $rc: $(head -n 2 "$scratch/none.err")"
fi

# c. The batch script: stopped by SIGUSR1 after its first checkpoint, requeued, resumed.
ckpt="$scratch/ckpt" out="$scratch/job.out"
long=(--backend cpu --data "$data" --hidden 64 --epochs 200 --global-batch 32 --seed 5
  --checkpoint-every 50 --quiet --json)
job=$(DPTRAIN=$dptrain sbatch --parsable -o "$out" -D "$scratch" "$script" "$ckpt" "${long[@]}")
if [ -n "$job" ]; then jobs+=("$job"); else fail "sbatch: no job id"; fi
# job_field NAME: the job's NAME=value (scontrol keeps a finished job for MinJobAge, 300 s).
job_field() { scontrol show job "$job" -o 2>/dev/null | grep -o "\b$1=[^ ]*" | cut -d= -f2; }
i=0
while [ $i -lt 1200 ] && ! compgen -G "$ckpt/ckpt-*.safetensors" >/dev/null; do
  sleep 0.1
  i=$((i + 1))
done
compgen -G "$ckpt/ckpt-*.safetensors" >/dev/null || fail "sbatch: no checkpoint after 120 s"
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job"
# The second run ends the job: COMPLETED within 150 s (5 s of cred_expire, some of training).
i=0 state=""
while [ $i -lt 750 ]; do
  state=$(job_field JobState)
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.2
  i=$((i + 1))
done
restarts=$(job_field Restarts)
if [ "$state" = COMPLETED ] && [ "$restarts" = 1 ]; then
  echo "ok: sbatch: requeued once, then completed [${SECONDS} s]"
else
  fail "sbatch: job $job $state after $restarts restart(s): $(tail -n 3 "$out")"
fi
grep -q "stopped on request: after step [0-9]* (request 10); resume from checkpoint $ckpt/ckpt-" \
  "$out" || fail "sbatch: the first run did not stop on SIGUSR1: $(grep -m1 dptrain "$out")"
grep -q "dptrain job $job: stopped on request, requeued" "$out" || fail "sbatch: no requeue line"
step=$(sed -n 's/.*resumed from .*: step \([0-9]*\),.*/\1/p' "$out" | head -n 1)
if [ -n "$step" ] && [ "$step" -gt 0 ] && grep -q "dptrain job $job: run 2" "$out" &&
  [ -n "$(hash_of "$out")" ]; then
  echo "ok: sbatch: run 2 resumed at step $step and finished [${SECONDS} s]"
else
  fail "sbatch: the second run did not resume and finish: $(tail -n 3 "$out")"
fi

[ $failures -eq 0 ] && echo "slurm: all passed"
exit $((failures > 0))
