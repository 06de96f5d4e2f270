#!/usr/bin/env bash
# check_runpath.sh MODULE... - every library a CUDA module needs beyond the
# C runtime (libnccl, libcublas, ...) is found through the module's own
# RUNPATH, so it loads where the loader's cache does not list the toolkit
# or NCCL. Needs no GPU: reads `readelf -d`. Exit 0 when every module
# passes; 1 naming each library not found and the run path looked at.
set -euo pipefail
bad=0
for m in "$@"; do
  dyn=$(readelf -d "$m")
  runpath=$(sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p' <<<"$dyn")
  needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dyn")
  for lib in $needed; do
    case $lib in # the C runtime: the system's own
    libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | \
      libstdc++.so.* | libgcc_s.so.* | ld-linux*) continue ;;
    esac
    found=
    IFS=: read -ra dirs <<<"$runpath"
    for d in "${dirs[@]}"; do
      [[ -n $d && -e $d/$lib ]] && found=$d && break
    done
    if [[ -z $found ]]; then
      echo "$(basename "$m"): $lib is not in its RUNPATH [${runpath}]"
      bad=1
    else
      echo "$(basename "$m"): $lib in $found"
    fi
  done
done
exit $bad
