#!/usr/bin/env bash
# A multi-node Open MPI cluster on one machine, for tests and benchmarks (docs/collectives.md,
# "A cluster on one machine"). Needs root (network namespaces), iproute2, util-linux's unshare.
#
#   tools/cluster.sh up N [--slots K]     N nodes (network namespaces PREFIXn1..PREFIXnN with
#                                         hostnames PREFIXn1..), K MPI slots each (default 2)
#   tools/cluster.sh run [MPIRUN OPTS] -- CMD...
#                                         mpirun across the nodes (one rank per slot unless
#                                         -np is given), TCP between nodes, no sshd
#   tools/cluster.sh down                 removes everything `up` made
#   tools/cluster.sh status               the nodes, or exit 1 when there is no cluster
#
# Layout: one namespace PREFIXbr holds the bridge PREFIXbr0 (SUBNET.1) and runs mpirun (as host
# PREFIXhead); node i is namespace PREFIXni, hostname PREFIXni, address SUBNET.(10+i) on its
# eth0, a veth whose other end PREFIXvi is on the bridge. Nothing is in the root namespace, so no
# cluster traffic leaves the namespaces made here. Names resolve through /etc/netns/NS/hosts,
# which `ip netns exec` mounts over /etc/hosts inside the namespace.
#
# Environment: DPT_CLUSTER_PREFIX (default dpt-; must start with "dpt", at most 6 characters),
# DPT_CLUSTER_SUBNET (the first three octets of a /24, default 10.231.0),
# DPT_CLUSTER_STATE (default /run/dptrain-cluster/PREFIX).
set -euo pipefail

prefix=${DPT_CLUSTER_PREFIX:-dpt-}
subnet=${DPT_CLUSTER_SUBNET:-10.231.0}
[[ $prefix =~ ^dpt[a-z0-9-]{0,3}$ ]] ||
  { echo "cluster.sh: DPT_CLUSTER_PREFIX '$prefix' must be 'dpt' and up to 3 of [a-z0-9-]" >&2; exit 2; }
state=${DPT_CLUSTER_STATE:-/run/dptrain-cluster/$prefix}
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
brns=${prefix}br bridge=${prefix}br0 head=${prefix}head

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '5,12p' "$self" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# Our namespaces that exist now (bridge namespace and nodes), one per line.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}(br|n[0-9]+)$" || true
}

# Kills every process inside our namespaces (they are all ours: the namespaces are).
kill_inside() {
  local ns sig pids=()
  for sig in TERM KILL; do
    pids=()
    for ns in $(our_namespaces); do
      mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$ns" 2>/dev/null)
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill -s $sig "${pids[@]}" 2>/dev/null || true
    [ $sig = KILL ] || sleep 1
  done
}

teardown() {
  kill_inside
  local ns
  for ns in $(our_namespaces); do
    ip netns del "$ns" 2>/dev/null || echo "cluster.sh: could not delete namespace $ns" >&2
    rm -rf "/etc/netns/$ns"
  done
  # veth ends die with their namespace; the bridge with its namespace.
  if [ -e "$state/made-etc-netns" ]; then rmdir /etc/netns 2>/dev/null || true; fi
  rm -rf "$state"
  rmdir "$(dirname "$state")" 2>/dev/null || true
}

cmd_up() {
  local n=${1:-} slots=2
  shift || true
  while [ $# -gt 0 ]; do
    case $1 in
      --slots) slots=${2:-}; shift 2 || usage ;;
      *) usage ;;
    esac
  done
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up: N must be 1..200, not '$n'"
  [[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "up: --slots must be a positive integer"
  [ "$(id -u)" -eq 0 ] || die "up: needs root (network namespaces)"
  local existing
  existing=$(our_namespaces | tr '\n' ' ')
  [ -z "$existing" ] || die "up: namespaces ${existing% } exist; run 'tools/cluster.sh down' first"
  [ ! -e "$state" ] || die "up: $state exists; run 'tools/cluster.sh down' first"
  # From here on a failure (or ^C) removes whatever was made.
  up_done=0
  trap '[ $up_done = 1 ] || { echo "cluster.sh: up failed; removing what it made" >&2; teardown; }' EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$state"
  if [ ! -d /etc/netns ]; then mkdir /etc/netns; touch "$state/made-etc-netns"; fi
  echo "$n" >"$state/nodes"
  # Names: /etc/hosts of every namespace we made.
  {
    echo "127.0.0.1 localhost"
    echo "$subnet.1 $head"
    for ((i = 1; i <= n; ++i)); do echo "$subnet.$((10 + i)) ${prefix}n$i"; done
  } >"$state/hosts"
  : >"$state/hostfile"
  for ((i = 1; i <= n; ++i)); do echo "${prefix}n$i slots=$slots" >>"$state/hostfile"; done

  ip netns add "$brns"
  mkdir -p "/etc/netns/$brns" && cp "$state/hosts" "/etc/netns/$brns/hosts"
  ip -n "$brns" link set lo up
  ip -n "$brns" link add "$bridge" type bridge
  ip -n "$brns" addr add "$subnet.1/24" dev "$bridge"
  ip -n "$brns" link set "$bridge" up
  for ((i = 1; i <= n; ++i)); do
    local ns=${prefix}n$i
    ip netns add "$ns"
    mkdir -p "/etc/netns/$ns" && cp "$state/hosts" "/etc/netns/$ns/hosts"
    # Made inside the bridge namespace, so no interface ever appears in the root namespace.
    ip -n "$brns" link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
    ip -n "$brns" link set "${prefix}v$i" master "$bridge" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$subnet.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  # The agent Open MPI's rsh launcher calls instead of ssh: AGENT [-options] HOST COMMAND...
  # runs COMMAND with /bin/sh in HOST's namespace, under HOST's hostname (a UTS namespace).
  cat >"$state/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1; shift
name=\$(awk -v h="\$host" '\$1 == h || \$2 == h { print \$2; exit }' "$state/hosts")
case \$name in ${prefix}n[0-9]*) ;; *) echo "cluster agent: unknown node '\$host'" >&2; exit 255 ;; esac
exec ip netns exec "\$name" unshare --uts sh -c 'hostname "\$0" && exec /bin/sh -c "\$*"' "\$name" "\$@"
EOF
  chmod +x "$state/agent"
  # Every node answers before we say it is up (where there is a ping).
  command -v ping >/dev/null && for ((i = 1; i <= n; ++i)); do
    ip netns exec "$brns" ping -c 1 -W 2 "$subnet.$((10 + i))" >/dev/null ||
      { echo "cluster.sh: node ${prefix}n$i does not answer" >&2; false; }
  done
  up_done=1
  trap - INT TERM
  echo "cluster up: $n nodes (${prefix}n1..${prefix}n$n, $subnet.11..$subnet.$((10 + n))), $slots slots each; bridge $bridge in namespace $brns"
}

cmd_run() {
  [ -e "$state/nodes" ] || die "run: no cluster ('tools/cluster.sh up N' first)"
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -gt 1 ] || usage
  shift
  command -v mpirun >/dev/null || die "run: no mpirun"
  local cidr=$subnet.0/24 mpirun
  mpirun=$(command -v mpirun)
  # shellcheck disable=SC2054  # "tcp,vader,self" is one value
  local args=(--hostfile "$state/hostfile"
    --mca plm rsh --mca plm_rsh_agent "$state/agent" --mca plm_rsh_no_tree_spawn 1
    --mca pml ob1 --mca btl tcp,vader,self
    --mca btl_tcp_if_include "$cidr" --mca oob_tcp_if_include "$cidr"
    "${opts[@]}" "$@")
  # The nodes share this machine's cores: no binding (every node would bind to the same cores),
  # and ranks yield while waiting when there are more slots than cores.
  [[ " ${opts[*]-} " == *" --bind-to "* ]] || args=(--bind-to none "${args[@]}")
  local slots
  slots=$(awk '{ sub("slots=", "", $2); s += $2 } END { print s }' "$state/hostfile")
  [ "$slots" -le "$(nproc)" ] || args=(--mca mpi_yield_when_idle 1 "${args[@]}")
  [ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # A failed or interrupted run leaves no process behind in the nodes.
  local rc=0
  trap 'kill_inside; exit 130' INT TERM
  ip netns exec "$brns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$head" "$mpirun" \
    "${args[@]}" || rc=$?
  trap - INT TERM
  if [ $rc -ne 0 ]; then
    echo "cluster.sh: run failed (exit $rc); stopping what it left in the nodes" >&2
    kill_inside
  fi
  return $rc
}

cmd_status() {
  local ns
  ns=$(our_namespaces | tr '\n' ' ')
  [ -n "$ns" ] || { echo "no cluster"; return 1; }
  echo "namespaces: ${ns% }"
  [ ! -e "$state/hostfile" ] || { echo "hostfile $state/hostfile:"; cat "$state/hostfile"; }
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  run) shift; cmd_run "$@" ;;
  down) shift; [ $# -eq 0 ] || usage; [ "$(id -u)" -eq 0 ] || die "down: needs root"; teardown ;;
  status) shift; cmd_status ;;
  *) usage ;;
esac
