#!/usr/bin/env bash
# flowcap.sh - inside a bed of two hosts (tests/netbed/netbed.sh run 2 none
# none -- ...), caps every TCP connection between them at RATE, as many
# cloud networks cap a single flow below what the link carries: each host's
# egress (eth0) gets an htb qdisc with 16 classes of RATE, and a connection
# goes to class (port >> 1) mod 16 of its port on host 0's side (hk's lower
# ranks open the connections, so host 0's port is the one Linux picks for
# connect(), which steps by 2), so connections mostly get a RATE of
# their own; other traffic is not limited. Two connections may share a
# class (when their ports collide modulo 32), then they share RATE.
#
#   tests/netbed/netbed.sh run 2 none none -- bench/flowcap.sh 500mbit CMD...
#
# Runs CMD (with the bed's NETBED_* variables) once the caps are set; the
# qdiscs go with the bed's namespaces.
set -euo pipefail
[ $# -ge 2 ] || {
  echo "usage: flowcap.sh RATE CMD..." >&2
  exit 2
}
rate=$1
shift
[ -n "${NETBED_NAMESPACES:-}" ] || {
  echo "flowcap.sh: run it inside tests/netbed/netbed.sh run" >&2
  exit 2
}
read -r -a ns <<<"$NETBED_NAMESPACES"
[ "${#ns[@]}" = 2 ] || {
  echo "flowcap.sh: a bed of 2 hosts, not ${#ns[@]}" >&2
  exit 2
}
for i in 0 1; do
  tcx=(ip netns exec "${ns[$i]}" tc)
  # the port Linux picked for connect(): the source on host 0, the
  # destination on host 1 (u32 offsets into the IP header's payload)
  side=$([ "$i" = 0 ] && echo sport || echo dport)
  "${tcx[@]}" qdisc replace dev eth0 root handle 1: htb default 99 r2q 10000 2>/dev/null
  "${tcx[@]}" class add dev eth0 parent 1: classid 1:99 htb rate 100gbit
  for c in $(seq 0 15); do
    "${tcx[@]}" class add dev eth0 parent 1: classid "1:$((c + 1))" htb \
      rate "$rate" ceil "$rate"
    "${tcx[@]}" filter add dev eth0 parent 1: protocol ip prio 1 u32 \
      match ip protocol 6 0xff match ip "$side" $((c * 2)) 0x001e \
      flowid "1:$((c + 1))"
  done
done
exec "$@"
