#!/bin/sh
# rsh_agent.sh HOSTS_FILE HOST CMD... - what a bed's agent runs (see
# netbed.sh): looks HOST up in HOSTS_FILE ("ADDRESS NAMESPACE" lines) and
# runs CMD, joined with spaces as ssh does, with sh -c inside that network
# namespace and a UTS namespace of its own whose host name is HOST.
# Exits 255 (as ssh does) when HOST is not a host of the bed.
set -u
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
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1" && shift && exec sh -c "$*"' rsh_agent "$host" "$@"
