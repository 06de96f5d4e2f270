#!/usr/bin/env bash
# rsh_agent.sh HOSTS_FILE HOST CMD... - what a bed's agent runs (see
# netbed.sh): the bed's stand-in for `ssh HOST CMD...`. It looks HOST up in
# HOSTS_FILE ("ADDRESS NAMESPACE" lines) and runs CMD, joined with spaces
# as ssh does, with sh -c inside that network namespace, in a UTS
# namespace of its own whose host name is HOST.
#
# Like an ssh session, the remote command lives only as long as the
# connection:
# - CMD runs in a PID namespace of its own (the "session"): when its first
#   process dies, the kernel kills every process in it, so nothing CMD
#   started (Open MPI's orted, the ranks it forked) outlives the session;
# - the session dies with this agent (PR_SET_PDEATHSIG all the way down),
#   and this agent dies with the process that started it (mpirun): a
#   SIGKILLed mpirun leaves no daemon behind in the bed;
# - like `ssh -o ServerAliveInterval=1 -o ServerAliveCountMax=N`, the agent
#   checks once a second, from the launcher's side, that HOST still answers
#   over its link (a TCP connection attempt to a closed port must be
#   refused); after NETBED_ALIVE_S seconds (default 10) without an answer
#   (its link was cut) it ends the session and exits 255, as ssh does, so
#   mpirun learns that the daemon is gone instead of waiting for it.
# Exits with CMD's status, or 255 (as ssh does) when HOST is not a host of
# the bed or stopped answering.
set -u

# rsh_agent.sh --watchdog SESSION HOST ALIVE_S: until process SESSION
# ends, checks once a second that HOST answers over its link (a connection
# to port 9, where nothing listens, is refused at once by a live host; a
# cut link answers nothing) and SIGKILLs SESSION after ALIVE_S seconds
# without an answer. Each step runs in the background and is waited for,
# so that SIGTERM ends the step and the watchdog at once.
watchdog() {
  local session=$1 host=$2 alive_s=$3 child="" last=$SECONDS
  # shellcheck disable=SC2016 # expanded by the probe's bash
  local probe='out=$( (exec 3<>"/dev/tcp/$0/9") 2>&1) && exit 0
    case $out in *refused*) exit 0 ;; esac
    exit 1'
  trap '[ -n "$child" ] && kill "$child" 2>/dev/null; exit 0' TERM
  while kill -0 "$session" 2>/dev/null; do
    timeout 2 bash -c "$probe" "$host" >/dev/null 2>&1 &
    child=$!
    if wait "$child"; then
      last=$SECONDS
    elif [ $((SECONDS - last)) -ge "$alive_s" ]; then
      echo "rsh_agent: host $host has not answered for $alive_s s (NETBED_ALIVE_S): ending its session" >&2
      kill -KILL "$session" 2>/dev/null
      exit 0
    fi
    sleep 1 >/dev/null 2>&1 &
    child=$!
    wait "$child"
  done
  exit 0
}
if [ "${1:-}" = --watchdog ]; then
  shift
  watchdog "$@"
fi

# Die with our parent (mpirun). setpriv sets the parent-death signal and
# execs this script again; a parent already gone by then means we exit.
if [ "${NETBED_AGENT_PARENT:-}" = "" ]; then
  NETBED_AGENT_PARENT=$PPID exec setpriv --pdeathsig KILL -- "$0" "$@"
fi
[ "$PPID" = "$NETBED_AGENT_PARENT" ] || exit 255
unset NETBED_AGENT_PARENT
map=$1
shift
# Open MPI may put ssh-style options before the host; skip them.
while [ $# -gt 0 ]; do
  case $1 in
  -x | -T | -n) shift ;;
  *) break ;;
  esac
done
host=${1:?rsh_agent: no host given}
shift
ns=$(awk -v h="$host" '$1 == h { print $2 }' "$map")
if [ -z "$ns" ]; then
  echo "rsh_agent: '$host' is not a host of this bed (hosts: $(awk '{print $1}' "$map" | tr '\n' ' '))" >&2
  exit 255
fi
alive_s=${NETBED_ALIVE_S:-10}
if ! [[ $alive_s =~ ^[1-9][0-9]*$ ]]; then
  echo "rsh_agent: NETBED_ALIVE_S='$alive_s' is not a whole number of seconds >= 1" >&2
  exit 255
fi

# The session. unshare --kill-child makes the PID namespace's first process
# die with unshare; setpriv makes unshare die with this agent. --mount-proc
# gives the host its own /proc, as a real host (or container) has: a pid a
# process of the host reads (getpid) is the one /proc/<pid> shows there. Stdin is
# kept (an asynchronous command would otherwise read /dev/null).
# shellcheck disable=SC2016 # expanded by the inner sh
setpriv --pdeathsig KILL -- ip netns exec "$ns" \
  unshare --uts --pid --mount-proc --fork --kill-child=KILL -- \
  sh -c 'hostname "$1" && shift && exec sh -c "$*"' rsh_agent "$host" "$@" <&0 &
session=$!

# The watchdog (below), in the launcher's namespace like ssh's client
# side: a process of its own that dies with this agent (a subshell would
# outlive a SIGKILLed agent, holding mpirun's output open).
setpriv --pdeathsig KILL -- "$0" --watchdog "$session" "$host" "$alive_s" \
  </dev/null &
watchdog=$!

rc=0
wait "$session" 2>/dev/null || rc=$? # (no "Killed" notice)
kill "$watchdog" 2>/dev/null
wait "$watchdog" 2>/dev/null
# 137: the session was killed (by the watchdog, or by netbed.sh down)
[ "$rc" = 137 ] && rc=255
exit "$rc"
