#!/usr/bin/env bash
# Network faults on a cluster of 2 nodes (tools/cluster.sh): (a) a link cut mid-run ends every
# rank on both nodes within the deadline + 2 s, each naming the rank it waited for across the
# cut; (b) a link down for 1 s and up again: the run finishes with the unfaulted run's
# param_hash; (c) a token bucket (tc tbf; this kernel has no netem) with a small queue on both
# nodes drops packets and queues the rest, under the default deadline: no stall, the same
# param_hash, and drops counted by the qdisc.
# Skipped (77) without root, network namespaces, unshare or Open MPI; (c) alone without tc's tbf.
# Usage: netfault_test.sh <dptrain> <scratch dir>
# DPT_NETFAULT_TEST_PREFIX / DPT_NETFAULT_TEST_SUBNET (default dptf- / 10.236.0) rename the
# test's cluster.
set -uo pipefail
dptrain=$1 dir=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cluster=$src/tools/cluster.sh
p=${DPT_NETFAULT_TEST_PREFIX:-dptf-}
export DPT_CLUSTER_PREFIX=$p DPT_CLUSTER_SUBNET=${DPT_NETFAULT_TEST_SUBNET:-10.236.0}
export DPT_CLUSTER_STATE=$dir/state
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset DPT_COMM_TIMEOUT

[ "$(id -u)" -eq 0 ] || { echo "SKIP: not root"; exit 77; }
for t in ip unshare mpirun; do
  command -v $t >/dev/null || { echo "SKIP: no $t"; exit 77; }
done
mpirun --version 2>/dev/null | grep -q "Open MPI" || { echo "SKIP: mpirun is not Open MPI"; exit 77; }
ip netns add "${p}probe" 2>/dev/null && ip netns del "${p}probe" ||
  { echo "SKIP: no network namespaces here"; exit 77; }
unshare --uts true 2>/dev/null || { echo "SKIP: no UTS namespaces here"; exit 77; }

"$cluster" down
rm -rf "$dir" && mkdir -p "$dir" || exit 1
failures=0
# shellcheck source=cli_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
trap '"$cluster" down' EXIT
"$cluster" up 2 || { echo "FAIL: up 2" >&2; exit 1; }
make_idx "$dir/data" train 400

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
ranks_left() {
  for ns in ${p}n1 ${p}n2; do ip netns pids "$ns"; done | xargs -r ps -o comm= -p 2>/dev/null |
    grep -c '^dptrain' || true
}
rank_pids() {
  for ns in ${p}n1 ${p}n2; do ip netns pids "$ns"; done | xargs -r ps -o pid=,comm= -p 2>/dev/null |
    awk '$2 == "dptrain" { print $1 }'
}
lines() { { wc -l <"$1"; } 2>/dev/null || echo 0; }
# train NAME HIDDEN STEPS: 2 ranks, one per node; NAME.json, NAME.err, log directory NAME/.
train() {
  rm -rf "${dir:?}/$1"
  timeout 80 "$cluster" run -np 2 --map-by node -x OPENBLAS_NUM_THREADS -- "$dptrain" train \
    --backend cpu --data "$dir/data" --hidden "$2" --global-batch 40 --epochs 1000 \
    --max-steps "$3" --seed 5 --json --quiet --log-dir "$dir/$1" >"$dir/$1.json" 2>"$dir/$1.err"
}
# wait_steps LOG N: until LOG has N lines (at most 30 s).
wait_steps() {
  for ((i = 0; i < 600 && $(lines "$1") < $2; ++i)); do sleep 0.05; done
}

# (a) A cut link under 4 ranks (2 per node, --map-by node: even ranks on n1, odd on n2), with
# DPT_COMM_TIMEOUT=3: every rank gone within 3 + 2 s, each naming the rank it waited for, and on
# each node a rank naming one across the cut. mpirun waits for the unreachable node's daemon
# (Open MPI's channel, not ours), so the test ends it. Open MPI's default kill grace
# (odls_base_sigkill_timeout, 1 s) lets every rank reach its own timeout and say why; at 0 the
# launcher's SIGKILL ends the cut in about 3.1 s but silences some ranks.
DPT_COMM_TIMEOUT=3 timeout 60 "$cluster" run -np 4 --map-by node -x DPT_COMM_TIMEOUT \
  -x OPENBLAS_NUM_THREADS -- sh -c 'exec "$@" 2>"$0/cut-$OMPI_COMM_WORLD_RANK.err"' "$dir" \
  "$dptrain" train --backend cpu --data "$dir/data" --hidden 1024 --global-batch 40 \
  --epochs 100000 --seed 5 --quiet --log-dir "$dir/cut" >"$dir/cut.out" 2>&1 &
job=$!
wait_steps "$dir/cut/steps.jsonl" 20
ranks=$(rank_pids)
ip -n "${p}n2" link set eth0 down
t0=$(now)
# the ranks' own pids, polled through /proc (a rank ended by a signal may stay a zombie a moment)
while awk -v g="$(since "$t0")" 'BEGIN { exit !(g < 30) }'; do
  alive=0
  for q in $ranks; do
    [ "$(awk '{ print $3 }' "/proc/$q/stat" 2>/dev/null)" = Z ] || [ ! -e "/proc/$q" ] || alive=1
  done
  [ $alive = 1 ] || break
  sleep 0.05
done
gone=$(since "$t0")
ip -n "${p}n2" link set eth0 up
kill "$job" 2>/dev/null
wait "$job" 2>/dev/null
if [ "$(wc -w <<<"$ranks")" -eq 4 ] && [ "$(ranks_left)" -eq 0 ] &&
  awk -v g="$gone" 'BEGIN { exit !(g <= 3 + 2) }'; then
  echo "ok: cut link: every rank on both nodes gone $gone s after the cut (deadline 3 s)"
else
  fail "cut link: ranks $ranks at the cut, $(ranks_left) left $gone s after it (deadline 3 s)"
fi
across=""
for r in 0 1 2 3; do
  said=$(grep -m1 -o "timeout: .*" "$dir/cut-$r.err" 2>/dev/null)
  # the ranks it names: "waiting for rank 1", "rank 0 did not enter", "ranks 0, 1 did not enter"
  peers=$(grep -m1 -oE "ranks? [0-9]+(, [0-9]+)*" <<<"${said#*: }" | tr -dc '0-9 ')
  if [ -z "${peers// /}" ]; then
    fail "cut link: rank $r did not name a rank: $(tail -2 "$dir/cut-$r.err" 2>/dev/null)"
  else
    echo "ok: cut link: rank $r: ${said%% (*} ... rank(s)$peers ..."
    for q in $peers; do
      [ $((q % 2)) -eq $((r % 2)) ] || { across="$across n$((r % 2 + 1))"; break; }
    done
  fi
done
[[ $across == *n1* && $across == *n2* ]] &&
  echo "ok: cut link: ranks on both nodes name a rank across the cut" ||
  fail "cut link: not both nodes name a rank across the cut (those that did:$across)"

# (b) n2's link down for 1 s after step 20, then up: no step completes while it is down, TCP
# retransmits after it, and the run ends with the unfaulted run's parameters.
train ref 1024 1000 || fail "unfaulted run: $(tail -2 "$dir/ref.err")"
ref=$(final_hash "$dir/ref.json")
t0=$(now)
train flap 1024 1000 &
job=$!
wait_steps "$dir/flap/steps.jsonl" 20
ip -n "${p}n2" link set eth0 down
at_down=$(lines "$dir/flap/steps.jsonl")
sleep 1
at_up=$(lines "$dir/flap/steps.jsonl")
ip -n "${p}n2" link set eth0 up
wait "$job" || fail "flap: the run failed: $(tail -2 "$dir/flap.err")"
flap=$(final_hash "$dir/flap.json")
if [ -n "$ref" ] && [ "$flap" = "$ref" ] && [ "$at_down" -lt 1000 ] &&
  [ $((at_up - at_down)) -le 1 ]; then
  echo "ok: flap: down for 1 s at step $at_down (steps while down: $((at_up - at_down))), param_hash $flap as unfaulted ($(since "$t0") s)"
else
  fail "flap: param_hash '$flap' against '$ref'; steps $at_down at the cut, $at_up 1 s later"
fi

# (c) Both nodes' eth0 through a 1 Mbit/s token bucket whose queue holds 4800 bytes: a step's
# exchange (about 11 KB each way) queues behind the rate and overflows the queue, so TCP loses
# packets and retransmits. Default deadline.
if ! command -v tc >/dev/null; then
  echo "SKIP (c): no tc"
elif ! ip netns exec "${p}n1" tc qdisc add dev lo root tbf rate 1mbit burst 3000 limit 4800 ||
  ! ip netns exec "${p}n1" tc qdisc del dev lo root; then
  echo "SKIP (c): this kernel has no tbf qdisc"
else
  train small 32 100 || fail "unshaped run: $(tail -2 "$dir/small.err")"
  ref=$(final_hash "$dir/small.json")
  for n in 1 2; do
    ip netns exec "${p}n$n" tc qdisc add dev eth0 root tbf rate 1mbit burst 3000 limit 4800 ||
      fail "tc qdisc tbf on ${p}n$n"
  done
  t0=$(now)
  train shaped 32 100 || fail "shaped run: $(tail -2 "$dir/shaped.err")"
  took=$(since "$t0")
  sent=0 dropped=0
  for n in 1 2; do
    read -r s d < <(ip netns exec "${p}n$n" tc -s qdisc show dev eth0 |
      sed -n 's/.* \([0-9]*\) pkt (dropped \([0-9]*\),.*/\1 \2/p')
    sent=$((sent + ${s:-0})) dropped=$((dropped + ${d:-0}))
    ip netns exec "${p}n$n" tc qdisc del dev eth0 root
  done
  loss=$(awk -v s=$sent -v d=$dropped 'BEGIN { if (s + d) printf "%.1f", 100 * d / (s + d) }')
  p50() { # LOG: the median step in ms
    grep -o '"seconds":[0-9.e-]*' "$1" | cut -d: -f2 | sort -g |
      awk '{ a[NR] = $1 } END { printf "%.1f", 1000 * a[int((NR + 1) / 2)] }'
  }
  shaped=$(final_hash "$dir/shaped.json")
  if [ -n "$ref" ] && [ "$shaped" = "$ref" ] && awk -v l="$loss" 'BEGIN { exit !(l >= 1) }'; then
    echo "ok: tbf: $dropped of $((sent + dropped)) packets dropped ($loss %), step p50" \
      "$(p50 "$dir/shaped/steps.jsonl") ms (unshaped $(p50 "$dir/small/steps.jsonl") ms)," \
      "100 steps in $took s, param_hash $shaped as unshaped"
  else
    fail "tbf: param_hash '$shaped' against '$ref', $dropped of $((sent + dropped)) packets dropped"
  fi
fi

"$cluster" down
trap - EXIT
echo "$failures failed"
[ $failures -eq 0 ]
