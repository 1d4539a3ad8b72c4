#!/usr/bin/env bash
# Network-namespace "hosts" for multi-host tests and benchmarks (needs root / CAP_NET_ADMIN).
#
#   scripts/netns.sh up PREFIX N [--private-shm]   N nodes PREFIX-n1..N on a private subnet
#   scripts/netns.sh exec PREFIX I -- CMD...       run CMD on node I (its network and mounts)
#   scripts/netns.sh ip PREFIX I                   node I's address (10.99.0.I)
#   scripts/netns.sh link PREFIX I down|up         cut / restore node I's link (a partition)
#   scripts/netns.sh kill PREFIX I                 SIGKILL every process on node I (a node dies)
#   scripts/netns.sh pids PREFIX I                 pids of the processes on node I, one a line
#   scripts/netns.sh down PREFIX                   kill every process on the nodes, remove all
#   scripts/netns.sh check                         exit 0 if namespaces can be made here, else
#                                                  print why and exit 1
#
# Topology: a hub namespace PREFIXhub holds a bridge; node I is namespace PREFIXnI with one
# interface, eth0 = 10.99.0.I/24, whose veth peer sits on the hub's bridge. The subnet exists only
# inside these namespaces: the host's own interfaces and routes are never touched, so two test runs
# with different prefixes can use the same addresses side by side. With --private-shm every node
# also gets its own mount namespace with a private tmpfs on /dev/shm (a container-like node: same
# kernel, different /dev/shm). PREFIX: at most 8 characters of [a-z0-9] (interface names are short).
set -euo pipefail

SUBNET=10.99.0
STATE_ROOT=/run/troupe-netns

die() { echo "netns.sh: $*" >&2; exit 1; }

check_prefix() {
  [[ "$1" =~ ^[a-z0-9]{1,8}$ ]] || die "PREFIX must be 1-8 characters of [a-z0-9], got '$1'"
}

# nsenter arguments that put a command on node $2 of prefix $1.
node_enter_args() {
  local prefix=$1 i=$2
  [ -e "/run/netns/${prefix}n${i}" ] || die "no node ${i} for prefix ${prefix} (run 'up' first)"
  local args=(--net="/run/netns/${prefix}n${i}")
  if [ -e "${STATE_ROOT}/${prefix}n${i}.mnt" ]; then
    args+=(--mount="${STATE_ROOT}/${prefix}n${i}.mnt")
  fi
  echo "${args[@]}"
}

cmd_check() {
  if [ "$(id -u)" != 0 ]; then echo "needs root to create network namespaces"; exit 1; fi
  local probe="trprobe$$"
  probe=${probe:0:15}
  if ! ip netns add "$probe" 2>/tmp/netns-check.$$; then
    echo "cannot create a network namespace: $(cat /tmp/netns-check.$$)"
    rm -f /tmp/netns-check.$$
    exit 1
  fi
  ip netns del "$probe"
  rm -f /tmp/netns-check.$$
}

cmd_up() {
  local prefix=$1 n=$2 private_shm=${3:-}
  check_prefix "$prefix"
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "N must be 1..200, got '$n'"
  local hub="${prefix}hub"
  [ -e "/run/netns/$hub" ] && die "prefix $prefix is in use (run 'down $prefix' first)"
  ip netns add "$hub"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  if [ "$private_shm" = "--private-shm" ]; then
    mkdir -p "$STATE_ROOT"
    # The namespace files below must live on a private mount to be bind-mounted onto.
    if ! mountpoint -q "$STATE_ROOT"; then
      mount --bind "$STATE_ROOT" "$STATE_ROOT"
      mount --make-private "$STATE_ROOT"
    fi
  fi
  local i
  for i in $(seq 1 "$n"); do
    local ns="${prefix}n${i}"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "${prefix}v${i}" type veth peer name "${prefix}e${i}"
    ip link set "${prefix}v${i}" netns "$hub"
    ip link set "${prefix}e${i}" netns "$ns"
    ip -n "$hub" link set "${prefix}v${i}" master br0
    ip -n "$hub" link set "${prefix}v${i}" up
    ip -n "$ns" link set "${prefix}e${i}" name eth0
    ip -n "$ns" addr add "${SUBNET}.${i}/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [ "$private_shm" = "--private-shm" ]; then
      local mnt="${STATE_ROOT}/${ns}.mnt"
      touch "$mnt"
      unshare --mount="$mnt" --propagation private \
        mount -t tmpfs -o size=2g,mode=1777 tmpfs /dev/shm
    fi
  done
}

cmd_exec() {
  local prefix=$1 i=$2
  shift 2
  [ "${1:-}" = "--" ] && shift
  [ $# -ge 1 ] || die "exec: no command"
  # shellcheck disable=SC2046
  exec nsenter $(node_enter_args "$prefix" "$i") -- "$@"
}

cmd_link() {
  local prefix=$1 i=$2 state=$3
  [ "$state" = up ] || [ "$state" = down ] || die "link: state must be up or down"
  ip -n "${prefix}hub" link set "${prefix}v${i}" "$state"
}

# SIGKILL every process whose network namespace is $1's (repeated: a dying daemon may fork).
kill_namespace() {
  local ns=$1 pids round
  for round in 1 2 3; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
}

cmd_kill() {
  local prefix=$1 i=$2
  check_prefix "$prefix"
  [ -e "/run/netns/${prefix}n${i}" ] || die "no node ${i} for prefix ${prefix}"
  kill_namespace "${prefix}n${i}"
}

cmd_down() {
  local prefix=$1
  check_prefix "$prefix"
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}(hub|n[0-9]+)$" || true); do
    kill_namespace "$ns"
  done
  # Processes with a private /dev/shm may have left the network namespace list already dead; wait
  # briefly so the namespaces are not held.
  sleep 0.1
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}(hub|n[0-9]+)$" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  local mnt
  for mnt in "$STATE_ROOT/${prefix}"n*.mnt; do
    [ -e "$mnt" ] || continue
    umount "$mnt" 2>/dev/null || true
    rm -f "$mnt"
  done
}

[ $# -ge 1 ] || die "usage: see the top of $0"
command=$1
shift
case "$command" in
  check) cmd_check ;;
  up) [ $# -ge 2 ] || die "usage: up PREFIX N [--private-shm]"; cmd_up "$@" ;;
  exec) [ $# -ge 3 ] || die "usage: exec PREFIX I -- CMD..."; cmd_exec "$@" ;;
  ip) [ $# -eq 2 ] || die "usage: ip PREFIX I"; echo "${SUBNET}.$2" ;;
  kill) [ $# -eq 2 ] || die "usage: kill PREFIX I"; cmd_kill "$@" ;;
  pids) [ $# -eq 2 ] || die "usage: pids PREFIX I"; check_prefix "$1"; ip netns pids "${1}n${2}" ;;
  link) [ $# -eq 3 ] || die "usage: link PREFIX I down|up"; cmd_link "$@" ;;
  down) [ $# -eq 1 ] || die "usage: down PREFIX"; cmd_down "$@" ;;
  *) die "unknown command '$command'" ;;
esac
