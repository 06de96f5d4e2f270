#!/usr/bin/env bash
# netbed.sh - K "hosts" on one machine: network namespaces on a bridge,
# each link shaped with tc, and an rsh agent that lets Open MPI start
# processes inside them. Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN),
# iproute2 (ip, tc) and util-linux (unshare).
#
#   netbed.sh up K RATE DELAY      create a bed; prints its directory (DIR)
#                                  on stdout, all else on stderr
#   netbed.sh down DIR             remove that bed: kill every process left
#                                  in its namespaces, delete namespaces,
#                                  links and DIR (idempotent)
#   netbed.sh run K RATE DELAY [--] CMD...
#                                  up, run CMD with the bed's NETBED_*
#                                  variables exported, at most
#                                  NETBED_TIMEOUT_S seconds (default 300),
#                                  then down (from a trap: also after a
#                                  failure or a signal); exits with CMD's
#                                  status (124 when it timed out)
#   netbed.sh check                exit 0 if a bed can be created here, else
#                                  say why on stderr and exit 77
#   netbed.sh gc                   remove every bed whose owner (the process
#                                  that ran `up`, or `run`) is gone: what a
#                                  SIGKILLed test leaves (each bed test runs
#                                  it first)
#   netbed.sh guard DIR OWNER      (started by `up`, in a session of its own)
#                                  wait until OWNER is gone, then remove the
#                                  bed if it is still there: so a bed goes
#                                  with its owner however that ends
#                                  (SIGKILL, a ctest timeout)
#
# K: 1..16 hosts. RATE: a tc rate ("1gbit", "100mbit") or "none". DELAY: a
# tc time ("100us", "1ms") or "none"; it needs the netem qdisc (up exits 77
# saying so where the kernel lacks it, unless NETBED_DELAY_OPTIONAL=1 turns
# that into a warning and no delay); it is added on each host's egress, so
# one-way host-to-host latency is DELAY and the round trip 2*DELAY. RATE
# limits each direction of each host's link (tbf on both ends of its veth).
#
# Layout of a bed with id ID (8 hex digits, random, so two runs never
# collide) and subnet 10.214.N.0/24 (N chosen under a lock among the /24s
# that no address or route on this machine uses yet):
#   bridge hkb<ID> in the root namespace, address 10.214.N.1/24
#   host i (0-based): namespace hkbed-<ID>-<i>, whose eth0 (a veth whose
#     other end hkv<ID>h<i> is on the bridge) has 10.214.N.(i+2)/24, lo up.
#     Its host name is its address: use the addresses in -H.
# DIR (/tmp/hknetbed-<ID>) holds:
#   env      sh-sourceable NETBED_* variables (below)
#   hosts    one line per host: "ADDRESS NAMESPACE"
#   agent    the rsh agent for Open MPI (--mca plm_rsh_agent DIR/agent): it
#            gets "HOST CMD...", and runs CMD with sh -c inside HOST's
#            namespace, in a fresh UTS namespace whose host name is HOST
#            (so gethostname() tells the hosts apart, as on real machines),
#            and in a PID namespace of its own that dies with the agent, as
#            an ssh session would; the agent dies with its parent (mpirun),
#            and ends the session when the host has not answered over its
#            link for NETBED_ALIVE_S seconds (default 10; read from the
#            agent's environment, so mpirun's), like ssh's ServerAlive
#            options (see rsh_agent.sh)
# Variables (in env, and exported to CMD by `run`):
#   NETBED_DIR, NETBED_ID, NETBED_SUBNET (10.214.N.0/24), NETBED_BRIDGE,
#   NETBED_HOSTS (addresses, space-separated), NETBED_NAMESPACES,
#   NETBED_LINKS (each host's veth end on the bridge, in host order: `ip
#   link set WORD down` cuts that host off the network),
#   NETBED_AGENT, NETBED_MPI_ARGS (--mca arguments that start Open MPI's
#   daemons through the agent and keep its traffic on the bed's subnet:
#   for `hkrun --mpi-args`), NETBED_AGENT_ARGS (the same without the
#   *_if_include pair: for `hkrun --network-interface $NETBED_SUBNET
#   --mpi-args "$NETBED_AGENT_ARGS"`, as Open MPI refuses a parameter
#   given twice).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
LOCK=/run/hk-netbed.lock
SUBNET_PREFIX=10.214

die() {
  echo "netbed: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

need_tools() {
  local t
  for t in ip tc unshare flock; do
    command -v "$t" >/dev/null 2>&1 || { echo "netbed: '$t' not found" >&2; return 1; }
  done
}

# Can a namespace be created here? (root, CAP_NET_ADMIN, /run/netns usable)
check() {
  need_tools || return 77
  if [ "$(id -u)" -ne 0 ]; then
    echo "netbed: needs root (network namespaces, veth, tc)" >&2
    return 77
  fi
  local probe="hkbed-probe-$$-$RANDOM"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netbed: cannot create a network namespace (no CAP_NET_ADMIN?)" >&2
    return 77
  fi
  ip netns del "$probe" 2>/dev/null || true
  return 0
}

# Validates K, RATE and DELAY.
check_params() {
  local k=$1 rate=$2 delay=$3
  if ! [[ $k =~ ^[0-9]+$ ]] || [ "$k" -lt 1 ] || [ "$k" -gt 16 ]; then
    die "K='$k' is not a number of hosts in 1..16"
  fi
  [[ $rate == none || $rate =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]] ||
    die "RATE='$rate' is not a tc rate such as 1gbit, 100mbit (or none)"
  [[ $delay == none || $delay =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] ||
    die "DELAY='$delay' is not a tc time such as 100us, 1ms (or none)"
}

# Picks a /24 under 10.214 that nothing on this machine uses (called with
# the lock held, so two beds never pick the same one).
pick_subnet() {
  local used n
  used=$(
    ip -4 -o addr show 2>/dev/null | awk '{print $4}'
    ip -4 route show table all 2>/dev/null | awk '{print $1}'
  )
  for n in $(shuf -i 1-254); do
    if ! grep -q "^$SUBNET_PREFIX\.$n\." <<<"$used"; then
      echo "$n"
      return 0
    fi
  done
  die "no free /24 left under $SUBNET_PREFIX.0.0/16"
}

# Does this kernel have netem? (probed on a veth pair in a scratch namespace)
have_netem() {
  local probe="hkbed-probe-$$-$RANDOM" ok=1
  ip netns add "$probe" || return 1
  if ip -n "$probe" link add p0 type veth peer name p1 &&
    ip netns exec "$probe" tc qdisc add dev p0 root netem delay 1ms 2>/dev/null; then
    ok=0
  fi
  ip netns del "$probe" 2>/dev/null || true
  return $ok
}

# Shapes dev (in namespace ns, or the root one when ns is empty).
shape() {
  local ns=$1 dev=$2 rate=$3 delay=$4
  local tcx=(tc)
  [ -n "$ns" ] && tcx=(ip netns exec "$ns" tc)
  if [ "$rate" != none ]; then
    "${tcx[@]}" qdisc add dev "$dev" root handle 1: tbf rate "$rate" \
      burst 256kb latency 50ms
    if [ "$delay" != none ]; then
      "${tcx[@]}" qdisc add dev "$dev" parent 1:1 handle 10: netem \
        delay "$delay" limit 100000
    fi
  elif [ "$delay" != none ]; then
    "${tcx[@]}" qdisc add dev "$dev" root handle 10: netem delay "$delay" \
      limit 100000
  fi
}

up() {
  [ $# -eq 3 ] || usage
  local k=$1 rate=$2 delay=$3
  check_params "$k" "$rate" "$delay"
  check >/dev/null || { check; exit 77; }
  if [ "$delay" != none ] && ! have_netem; then
    if [ "${NETBED_DELAY_OPTIONAL:-0}" = 1 ]; then
      echo "netbed: warning: this kernel has no netem qdisc; DELAY=$delay is ignored" >&2
      delay=none
    else
      echo "netbed: DELAY=$delay needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM); use DELAY=none, or NETBED_DELAY_OPTIONAL=1 to go on without it" >&2
      exit 77
    fi
  fi
  local id dir n i ns addr hosts="" nss="" links=""
  local owner=${NETBED_OWNER_PID:-$PPID}
  id=$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')
  dir=/tmp/hknetbed-$id
  mkdir -m 700 "$dir"
  # From here on, a failure (set -e) removes what was made.
  failed_up_dir=$dir
  trap 'down "$failed_up_dir" >/dev/null 2>&1 || true' EXIT
  local br=hkb$id
  exec 9>"$LOCK"
  flock -w 30 9 || die "cannot take $LOCK within 30 s"
  n=$(pick_subnet)
  local subnet=$SUBNET_PREFIX.$n.0/24
  {
    echo "NETBED_ID=$id"
    echo "NETBED_OWNER=$owner"
    echo "NETBED_DIR=$dir"
    echo "NETBED_SUBNET=$subnet"
    echo "NETBED_BRIDGE=$br"
  } >"$dir/env"
  ip link add "$br" type bridge
  ip addr add "$SUBNET_PREFIX.$n.1/24" dev "$br"
  ip link set "$br" up
  flock -u 9
  exec 9>&-
  : >"$dir/hosts"
  for ((i = 0; i < k; i++)); do
    ns=hkbed-$id-$i
    addr=$SUBNET_PREFIX.$n.$((i + 2))
    echo "$addr $ns" >>"$dir/hosts"
    ip netns add "$ns"
    ip link add "hkv${id}h$i" type veth peer name "hkp${id}h$i"
    ip link set "hkv${id}h$i" master "$br" up
    ip link set "hkp${id}h$i" netns "$ns"
    ip -n "$ns" link set "hkp${id}h$i" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    shape "$ns" eth0 "$rate" "$delay"
    shape "" "hkv${id}h$i" "$rate" none
    hosts="$hosts${hosts:+ }$addr"
    nss="$nss${nss:+ }$ns"
    links="$links${links:+ }hkv${id}h$i"
  done
  cat >"$dir/agent" <<AGENT
#!/bin/sh
# Open MPI's rsh agent for bed $id: "agent HOST CMD...".
exec "$here/rsh_agent.sh" "$dir/hosts" "\$@"
AGENT
  chmod 755 "$dir/agent"
  {
    echo "NETBED_HOSTS='$hosts'"
    echo "NETBED_NAMESPACES='$nss'"
    echo "NETBED_LINKS='$links'"
    echo "NETBED_AGENT=$dir/agent"
    echo "NETBED_AGENT_ARGS='--mca plm_rsh_agent $dir/agent --mca btl self,tcp --mca pml ob1'"
    echo "NETBED_MPI_ARGS='--mca plm_rsh_agent $dir/agent --mca btl self,tcp --mca pml ob1 --mca btl_tcp_if_include $subnet --mca oob_tcp_if_include $subnet'"
  } >>"$dir/env"
  trap - EXIT
  # The guard: in its own session (a signal to the owner's process group
  # does not reach it), with no file of ours open (a reader of our stdout
  # sees EOF at once).
  setsid "$here/netbed.sh" guard "$dir" "$owner" </dev/null >/dev/null 2>&1 &
  echo "netbed: up: $k host(s) $hosts on $subnet (rate $rate, delay $delay), bed $dir" >&2
  echo "$dir"
}

down() {
  [ $# -eq 1 ] || usage
  local dir=$1 id ns pids i
  case $dir in
  /tmp/hknetbed-*) ;;
  *) die "'$dir' is not a bed directory (/tmp/hknetbed-ID)" ;;
  esac
  id=${dir#/tmp/hknetbed-}
  [[ $id =~ ^[0-9a-f]{8}$ ]] || die "'$dir' is not a bed directory"
  # Every namespace of this bed, whether or not the hosts file got written.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^hkbed-$id-" || true); do
    for i in 1 2 3 4 5 6 7 8 9 10; do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -z "$pids" ] && break
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null || true
      sleep 0.1 # bounded: at most 10 rounds
    done
    ip netns del "$ns" 2>/dev/null || true
  done
  # veth ends left in the root namespace, then the bridge.
  for i in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^hk[vp]${id}h[0-9]+$" || true); do
    ip link del "$i" 2>/dev/null || true
  done
  ip link del "hkb$id" 2>/dev/null || true
  # Open MPI's session folders of the bed's hosts (ompi.HOSTNAME.UID, the
  # hostname being the host's address): an orted killed with its
  # namespace leaves its own behind.
  local addr
  if [ -f "$dir/hosts" ]; then
    while read -r addr _; do
      [[ $addr =~ ^[0-9.]+$ ]] && rm -rf "${TMPDIR:-/tmp}/ompi.$addr".* 2>/dev/null
    done <"$dir/hosts"
  fi
  rm -rf "$dir"
  echo "netbed: down: bed $id removed" >&2
}

run() {
  [ $# -ge 4 ] || usage
  local k=$1 rate=$2 delay=$3
  shift 3
  [ "${1:-}" = "--" ] && shift
  [ $# -ge 1 ] || usage
  local rc=0
  run_dir=$(NETBED_OWNER_PID=$$ up "$k" "$rate" "$delay")
  run_child=
  trap 'down "$run_dir"' EXIT
  # A signal stops CMD (timeout passes it on), then the EXIT trap tears down.
  for sig in INT TERM HUP; do
    # shellcheck disable=SC2064
    trap "[ -n \"\$run_child\" ] && kill -$sig \$run_child 2>/dev/null; exit \$((128 + $(kill -l $sig)))" $sig
  done
  set -a
  # shellcheck disable=SC1091
  . "$run_dir/env"
  set +a
  # In the background (with stdin kept), so that a signal to this script
  # runs its trap at once instead of after CMD.
  timeout --kill-after=5 "${NETBED_TIMEOUT_S:-300}" "$@" <&0 &
  run_child=$!
  wait "$run_child" || rc=$?
  run_child=
  exit "$rc"
}

# Is process $1 alive (not gone, not a zombie)?
alive() {
  kill -0 "$1" 2>/dev/null &&
    [ "$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null)" != Z ]
}

# Removes the bed DIR once process OWNER is gone (checked every second);
# ends when the bed is removed by anyone.
guard() {
  [ $# -eq 2 ] || usage
  local dir=$1 owner=$2
  while [ -d "$dir" ] && alive "$owner"; do
    sleep 1
  done
  if [ -d "$dir" ]; then
    down "$dir" >/dev/null 2>&1 || true
  fi
}

# Removes the beds whose owner process is gone.
gc() {
  local ids id owner
  ids=$(
    find /tmp -maxdepth 1 -name 'hknetbed-*' 2>/dev/null | sed 's|^/tmp/hknetbed-||'
    ip netns list 2>/dev/null | awk '{print $1}' | sed -n 's/^hkbed-\([0-9a-f]\{8\}\)-[0-9]*$/\1/p'
    ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: hkb\([0-9a-f]\{8\}\)[:@].*/\1/p'
  )
  for id in $(echo "$ids" | sort -u); do
    [[ $id =~ ^[0-9a-f]{8}$ ]] || continue
    owner=$(sed -n 's/^NETBED_OWNER=//p' "/tmp/hknetbed-$id/env" 2>/dev/null || true)
    if [ -n "$owner" ] && alive "$owner"; then
      continue
    fi
    # No owner recorded yet may mean a bed being made right now: leave
    # those younger than a minute alone.
    if [ -z "$owner" ] && [ -d "/tmp/hknetbed-$id" ] &&
      [ -n "$(find "/tmp/hknetbed-$id" -maxdepth 0 -mmin -1)" ]; then
      continue
    fi
    down "/tmp/hknetbed-$id"
  done
}

cmd=${1:-}
shift || true
case $cmd in
up) up "$@" ;;
down) down "$@" ;;
run) run "$@" ;;
check) check ;;
gc) gc ;;
guard) guard "$@" ;;
*) usage ;;
esac
