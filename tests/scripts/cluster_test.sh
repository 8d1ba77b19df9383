#!/usr/bin/env bash
# tools/cluster.sh: a cluster of 2 nodes (network namespaces) on this machine. A failed `up`
# leaves nothing behind, a second `up` is refused; 2 nodes x 2 ranks are 2 nodes to MPI (two
# hostnames, 2 local ranks each); `dptrain train` on them ends with the param_hash of 4 ranks on
# one node, and with --deterministic with the param_hash of one replica; comm_mpi's nodes case
# there: each rank sees 2 nodes, its node peer through shared memory, the other node through
# MPI, sums right; a failing run leaves no process in the nodes;
# a cut link between the nodes ends every rank within the deadline + 2 s; `down` removes every
# namespace.
# Skipped (77) without root, network namespaces, unshare or Open MPI.
# Usage: cluster_test.sh <dptrain> <scratch dir> [mpiexec] [comm_mpi]
# DPT_CLUSTER_TEST_PREFIX / DPT_CLUSTER_TEST_SUBNET (default dptt- / 10.232.0) rename the test's
# cluster, for a run by hand next to someone else's.
set -uo pipefail
dptrain=$1 dir=$2 mpiexec=${3:-mpiexec --oversubscribe} comm_mpi=${4:-}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cluster=$src/tools/cluster.sh
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
# The test's own names and state, apart from a cluster a user may have up.
p=${DPT_CLUSTER_TEST_PREFIX:-dptt-}
export DPT_CLUSTER_PREFIX=$p DPT_CLUSTER_SUBNET=${DPT_CLUSTER_TEST_SUBNET:-10.232.0}
export DPT_CLUSTER_STATE=$2/state
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

[ "$(id -u)" -eq 0 ] || { echo "SKIP: not root"; exit 77; }
for t in ip unshare mpirun; do
  command -v $t >/dev/null || { echo "SKIP: no $t"; exit 77; }
done
mpirun --version 2>/dev/null | grep -q "Open MPI" || { echo "SKIP: mpirun is not Open MPI"; exit 77; }
ip netns add "${p}probe" 2>/dev/null && ip netns del "${p}probe" ||
  { echo "SKIP: no network namespaces here"; exit 77; }
unshare --uts true 2>/dev/null || { echo "SKIP: no UTS namespaces here"; exit 77; }

# A run of this test killed midway may have left its cluster: ours (prefix $p) to remove.
"$cluster" down
rm -rf "$dir" && mkdir -p "$dir" || exit 1
failures=0
ours() { ip netns list | awk '{print $1}' | grep "^$p" | sort | tr '\n' ' '; }
trap '"$cluster" down' EXIT

# 1. A failing `up` (a subnet that is no address) removes what it made.
DPT_CLUSTER_SUBNET=${DPT_CLUSTER_SUBNET%.*}.999 "$cluster" up 2 >"$dir/badup.log" 2>&1 &&
  fail "up with a bad subnet succeeded"
if [ -n "$(ours)" ] || [ -e "$DPT_CLUSTER_STATE" ] || ls -d /etc/netns/$p* >/dev/null 2>&1; then
  fail "a failed up left: $(ours) $(ls -d "$DPT_CLUSTER_STATE" /etc/netns/$p* 2>/dev/null)"
else
  echo "ok: failed up cleaned up ($(grep -c . "$dir/badup.log") lines: $(tail -1 "$dir/badup.log"))"
fi

# 2. Up, and a second up refused without touching the first.
"$cluster" up 2 || { echo "FAIL: up 2" >&2; exit 1; }
if "$cluster" up 2 2>"$dir/again.err"; then
  fail "a second up succeeded"
else
  grep -q "exist" "$dir/again.err" && echo "ok: second up refused: $(cat "$dir/again.err")" ||
    fail "second up: $(cat "$dir/again.err")"
fi
[ "$(ours)" = "${p}br ${p}n1 ${p}n2 " ] || fail "namespaces after up: '$(ours)'"

# 3. MPI's locality: two hostnames, 2 ranks local to each.
loc=$(timeout 120 "$cluster" run -- sh -c \
  'echo "$(hostname) rank $OMPI_COMM_WORLD_RANK local_size $OMPI_COMM_WORLD_LOCAL_SIZE"' | sort)
echo "$loc"
[ "$(awk '{print $1}' <<<"$loc" | sort -u | tr '\n' ' ')" = "${p}n1 ${p}n2 " ] ||
  fail "hostnames: $loc"
[ "$(grep -c 'local_size 2$' <<<"$loc")" -eq 4 ] || fail "expected 4 ranks with 2 local: $loc"

# 4. dptrain train, 2 nodes x 2 ranks against 4 ranks on one node: the same parameters.
n=400
mkdir -p "$dir/data"
{ be32 2051; be32 $n; be32 8; be32 8; head -c $((n * 64)) /dev/urandom; } >"$dir/data/train-images-idx3-ubyte"
{ be32 2049; be32 $n; for ((i = 0; i < n; ++i)); do printf "\\x0$((i % 10))"; done; } \
  >"$dir/data/train-labels-idx1-ubyte"
args=(train --backend cpu --data "$dir/data" --hidden 32 --global-batch 40 --epochs 1
  --max-steps 6 --seed 5 --json --quiet)
timeout 200 "$cluster" run -x OPENBLAS_NUM_THREADS -- "$dptrain" "${args[@]}" \
  --save-weights "$dir/cluster.st" >"$dir/cluster.json" 2>"$dir/cluster.err" ||
  fail "train on the cluster: $(tail -3 "$dir/cluster.err")"
# The same grouping on one node (DPT_COMM_FAKE_NODES=2: 2 "nodes" of 2 ranks), so the same
# hierarchical sums: the same bits. The flat ring of 4 ranks on one node adds in another order.
DPT_COMM_FAKE_NODES=2 timeout 200 $mpiexec -x DPT_COMM_FAKE_NODES -np 4 "$dptrain" "${args[@]}" \
  >"$dir/one.json" 2>"$dir/one.err" || fail "train on one node: $(tail -3 "$dir/one.err")"
timeout 200 $mpiexec -np 4 "$dptrain" "${args[@]}" --save-weights "$dir/flat.st" \
  >"$dir/flat.json" 2>"$dir/flat.err" || fail "train on one node, flat: $(tail -3 "$dir/flat.err")"
on_cluster=$(final_hash "$dir/cluster.json") on_one=$(final_hash "$dir/one.json")
if [ -n "$on_cluster" ] && [ "$on_cluster" = "$on_one" ] && [[ $on_one != *" "* ]]; then
  echo "ok: param_hash $on_cluster on 2 nodes x 2 ranks and on 1 node x 4 ranks as 2 x 2"
else
  fail "param_hash '$on_cluster' on the cluster, '$on_one' on one node as 2 x 2"
fi
diff_flat=$(max_diff "$dir/cluster.st" "$dir/flat.st")
if awk -v d="${diff_flat%% *}" 'BEGIN { exit !(d != "none" && d + 0 <= 1e-5) }'; then
  echo "ok: the cluster's weights within 1e-5 of one node's flat ring: largest difference $diff_flat"
else
  fail "the cluster's weights against one node's flat ring: largest difference $diff_flat"
fi

# 4a. --deterministic: 2 nodes x 2 ranks end on the bits of one replica (docs/training.md).
det=("${args[@]}" --deterministic --group-size 4)
timeout 200 "$cluster" run -x OPENBLAS_NUM_THREADS -- "$dptrain" "${det[@]}" \
  >"$dir/det-cluster.json" 2>"$dir/det-cluster.err" ||
  fail "--deterministic on the cluster: $(tail -3 "$dir/det-cluster.err")"
"$dptrain" "${det[@]}" >"$dir/det-one.json" 2>"$dir/det-one.err" ||
  fail "--deterministic, 1 replica: $(tail -3 "$dir/det-one.err")"
on_cluster=$(final_hash "$dir/det-cluster.json") on_one=$(final_hash "$dir/det-one.json")
if [ -n "$on_cluster" ] && [ "$on_cluster" = "$on_one" ]; then
  echo "ok: --deterministic param_hash $on_cluster on 2 nodes x 2 ranks and on 1 replica"
else
  fail "--deterministic param_hash '$on_cluster' on the cluster, '$on_one' on 1 replica"
fi

# 4b. --model dlrm with each node's own shard files (--node-shards): node n1 holds shards 0
# and 2, node n2 shards 1 and 3; 2 nodes x 1 rank train to the same parameters as 2 ranks on one
# node reading all four (rank r takes shards r and r + 2 there).
"$dptrain" data synth --out "$dir/all" --samples 4000 --shards 4 --rows 500 --tables 4 \
  >/dev/null || fail "data synth"
mkdir -p "$dir/${p}n1" "$dir/${p}n2"
cp "$dir"/all/synth-0000[02].bin "$dir/${p}n1/" && cp "$dir"/all/synth-0000[13].bin "$dir/${p}n2/"
dlrm=(train --model dlrm --backend cpu --global-batch 256 --epochs 1 --seed 3 --json --quiet)
timeout 200 "$cluster" run -np 2 --map-by node -x OPENBLAS_NUM_THREADS -- sh -c \
  'exec "$@" --node-shards --data "$0/$(hostname)/synth-*.bin"' "$dir" "$dptrain" "${dlrm[@]}" \
  >"$dir/dlrm-cluster.json" 2>"$dir/dlrm-cluster.err" ||
  fail "dlrm on the cluster: $(tail -3 "$dir/dlrm-cluster.err")"
timeout 200 $mpiexec -np 2 "$dptrain" "${dlrm[@]}" --data "$dir/all/synth-*.bin" \
  >"$dir/dlrm-one.json" 2>"$dir/dlrm-one.err" || fail "dlrm on one node: $(tail -3 "$dir/dlrm-one.err")"
on_cluster=$(final_hash "$dir/dlrm-cluster.json") on_one=$(final_hash "$dir/dlrm-one.json")
if [ -n "$on_cluster" ] && [ "$on_cluster" = "$on_one" ]; then
  echo "ok: dlrm with each node's own shards: param_hash $on_cluster, as on one node"
else
  fail "dlrm: param_hash '$on_cluster' on the cluster (own shards), '$on_one' on one node"
fi

# 5. One communicator over both nodes (comm_mpi's nodes case, every rank asserting): 2 nodes,
# ids the same on every rank, a direct all-reduce sending to the node peer through the
# shared-memory channels and to the other node through MPI, and closed-form sums (direct and
# ring).
if [ -n "$comm_mpi" ]; then
  t0=$(date +%s.%N)
  if CK_RUN_CASE=nodes DPT_TEST_NODES=2 timeout 120 "$cluster" run -x CK_RUN_CASE \
    -x DPT_TEST_NODES -- "$comm_mpi" >"$dir/nodes.out" 2>&1 &&
    grep -q "^100%: Checks: 1, Failures: 0, Errors: 0" "$dir/nodes.out"; then
    echo "ok: $(grep -o 'nodes_and_paths: .*' "$dir/nodes.out")" \
      "($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s)"
  else
    fail "comm_mpi nodes case on the cluster: $(tail -5 "$dir/nodes.out")"
  fi
fi

# 6. A failing run: non-zero, and no process left in the nodes.
timeout 120 "$cluster" run -- "$dptrain" train --no-such-flag >"$dir/bad.out" 2>"$dir/bad.err" &&
  fail "a failing run exited 0"
left=$(for ns in $(ours); do ip netns pids "$ns"; done | tr '\n' ' ')
[ -z "$left" ] && echo "ok: failing run left no process" || fail "processes left in the nodes: $left"

# 7. A cut link (n2's eth0 down) while 2 ranks train across the nodes: every rank on both
# sides is gone within the deadline (DPT_COMM_TIMEOUT=3) + 2 s, each having said why (its
# stderr goes to a file: n2's output cannot reach mpirun any more). mpirun itself waits for
# the unreachable node's daemon (Open MPI's TCP channel), so the test ends it.
ranks_left() {
  for ns in ${p}n1 ${p}n2; do ip netns pids "$ns"; done | xargs -r ps -o comm= -p 2>/dev/null |
    grep -c '^dptrain' || true
}
DPT_COMM_TIMEOUT=3 timeout 90 "$cluster" run -np 2 --map-by node -x DPT_COMM_TIMEOUT \
  -x OPENBLAS_NUM_THREADS -- sh -c 'exec "$@" 2>"$0/cut-$OMPI_COMM_WORLD_RANK.err"' "$dir" \
  "$dptrain" train --backend cpu --data "$dir/data" --hidden 8192 --global-batch 40 \
  --epochs 100000 --seed 5 --quiet >"$dir/cut.out" 2>&1 &
job=$!
for ((i = 0; i < 100 && $(ranks_left) < 2; ++i)); do sleep 0.1; done
sleep 3 # past the set-up, into the steps
ip -n "${p}n2" link set eth0 down
t0=$(date +%s.%N)
while [ "$(ranks_left)" -gt 0 ] && awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { exit !(b - a < 30) }'; do
  sleep 0.1
done
gone=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
ip -n "${p}n2" link set eth0 up
kill "$job" 2>/dev/null
wait "$job" 2>/dev/null
if [ "$(ranks_left)" -eq 0 ] && awk -v g="$gone" 'BEGIN { exit !(g <= 3 + 2 + 1) }'; then
  echo "ok: cut link: every rank gone $gone s after the cut (deadline 3 s)"
else
  fail "cut link: $(ranks_left) ranks left $gone s after the cut (deadline 3 s)"
fi
for r in 0 1; do
  grep -q "timeout\|did not return within" "$dir/cut-$r.err" &&
    echo "ok: cut link: rank $r said: $(grep -m1 "timeout\|did not return" "$dir/cut-$r.err")" ||
    fail "cut link: rank $r said: $(tail -3 "$dir/cut-$r.err" 2>/dev/null)"
done

# 8. Down: every namespace, the state and the hosts files gone.
"$cluster" down
if [ -n "$(ours)" ] || [ -e "$DPT_CLUSTER_STATE" ] || ls -d /etc/netns/$p* >/dev/null 2>&1; then
  fail "after down: $(ours) $(ls -d "$DPT_CLUSTER_STATE" /etc/netns/$p* 2>/dev/null)"
else
  echo "ok: down removed every namespace"
fi
"$cluster" status >/dev/null && fail "status after down says a cluster is up"
trap - EXIT
echo "$failures failed"
[ $failures -eq 0 ]
