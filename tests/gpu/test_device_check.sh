#!/usr/bin/env bash
# test_device_check.sh SCRIPT - a dry run of scripts/device-check.sh
# (DEVICE_CHECK_STUB: stand-in commands instead of the GPU steps), so its
# control flow, time bounds and summary are checked without a GPU:
#   1. mixed: a step that passes, fails, skips itself (exit 77, with a
#      "SKIP: why" line or without: its last line is the reason), has no
#      stand-in, hangs past its bound (killed: counted failed, its process
#      gone), a failed build-rest whose dependants are skipped, and a
#      probe that says NCCL refuses two ranks on one GPU (the multirank
#      step skipped with that reason);
#   2. all pass, the probe says "works": the multirank step runs, exit 0;
#   3. stage 1's time: a build that hangs is killed at stage 1's end, the
#      steps that need it are skipped, and a stage-2 step with no time
#      left is "not run" and counted failed.
# Each checks the verdict lines, the final "N passed, N failed, N
# skipped" and the exit status. Exit 0 when all hold; 1 naming the first
# that did not.
set -uo pipefail
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*"
  echo "---- summary.txt"
  cat "$out/summary.txt" 2>/dev/null
  exit 1
}
# expect LINE-REGEX: summary.txt has a line matching it
expect() {
  grep -Eq -- "$1" "$out/summary.txt" || fail "no summary line matching '$1'"
}
# stand NAME BODY: an executable stand-in for step NAME
stand() {
  printf '#!/usr/bin/env bash\n%s\n' "$2" >"$stub/$1"
  chmod +x "$stub/$1"
}
# dry OUT [VAR=VALUE...]: the script on the stand-ins; its status in rc
dry() {
  out=$1
  shift
  env DEVICE_CHECK_STUB="$stub" "$@" bash "$script" "$out" \
    >"$out.stdout" 2>&1 </dev/null
  rc=$?
}
all_steps="env nccl deps build test_cuda test_cuda_pair device-unit gpu-python
  copybw build-rest gpu-python-np4 staged-hk-np4 staged-gloo-np4
  train-vs-torch probe-plain probe-multi-rank probe-hostid one-comm-np2"

# ---- 1. mixed ----
stub=$tmp/stub1
mkdir -p "$stub"
for s in $all_steps; do stand "$s" "echo \"$s stand-in ran\""; done
stand deps 'echo "SKIP: no .devdeps here"; exit 77'
stand test_cuda_pair 'echo "1 of 1 tests failed"; exit 1'
rm "$stub/gpu-python"
stand copybw "echo \$\$ >$tmp/hang.pid; exec sleep 600"
stand build-rest 'echo "ninja: build stopped"; exit 2'
stand probe-plain 'echo "cuda_pair: refused (Duplicate GPU detected)"'
stand probe-multi-rank 'echo "cuda_pair: refused (Duplicate GPU detected)"'
stand probe-hostid 'echo "cuda_pair: no usable GPU"; exit 77'
dry "$tmp/out1" DEVICE_CHECK_BOUNDS="copybw=2"
[ "$rc" = 1 ] || fail "mixed: exit $rc, not 1"
for s in env nccl build test_cuda device-unit gpu-python-np4 staged-gloo-np4 \
  probe-plain probe-multi-rank; do
  expect "^PASS  stage [12]  $s "
done
expect "^SKIP  stage 1  deps +[0-9]+s  no .devdeps here$"
expect "^SKIP  stage 2  probe-hostid +[0-9]s  cuda_pair: no usable GPU$"
expect "^FAIL  stage 1  test_cuda_pair +[0-9]+s  rc=1: 1 of 1 tests failed$"
expect "^SKIP  stage 1  gpu-python .*dry run: no stand-in"
expect "^FAIL  stage 1  copybw +[2-5]s  timed out after 2s \(killed\)$"
expect "^FAIL  stage 2  build-rest .*rc=2: ninja: build stopped$"
for s in staged-hk-np4 train-vs-torch; do
  expect "^SKIP  stage 2  $s +[0-9]+s  the build failed$"
done
expect "^SKIP  stage 2  one-comm-np2 +[0-9]+s  NCCL does not take two ranks of one communicator on one GPU \(probes: cuda_pair: refused \(Duplicate GPU detected\)"
expect "stage 1: FAILED \(2 failed\)"
[ "$(tail -1 "$out/summary.txt")" = "9 passed, 3 failed, 6 skipped" ] ||
  fail "mixed: last line '$(tail -1 "$out/summary.txt")'"
[ "$(grep -c '^\(PASS\|FAIL\|SKIP\)  stage' "$out/summary.txt")" = 18 ] ||
  fail "mixed: not one verdict per step"
pid=$(cat "$tmp/hang.pid")
if kill -0 "$pid" 2>/dev/null; then
  kill "$pid"
  fail "copybw's stand-in (pid $pid) outlived its bound"
fi
grep -q '^test_cuda stand-in ran$' "$out/stage1.log" ||
  fail "stage1.log lacks test_cuda's output"
grep -q '^staged-gloo-np4 stand-in ran$' "$out/stage2.log" ||
  fail "stage2.log lacks staged-gloo-np4's output"
[ "$(find "$out/logs" -name '*.log' | wc -l)" = 18 ] ||
  fail "mixed: not one log per step in logs/"

# ---- 2. all pass ----
stub=$tmp/stub2
mkdir -p "$stub"
for s in $all_steps; do stand "$s" "echo \"$s stand-in ran\""; done
stand probe-multi-rank 'echo "cuda_pair: works (2 ranks, every element 3)"'
dry "$tmp/out2"
[ "$rc" = 0 ] || fail "all pass: exit $rc, not 0"
expect "^PASS  stage 2  one-comm-np2 "
expect "stage 1: hk works on this GPU \(9 passed, 0 skipped\)"
[ "$(tail -1 "$out/summary.txt")" = "18 passed, 0 failed, 0 skipped" ] ||
  fail "all pass: last line '$(tail -1 "$out/summary.txt")'"

# ---- 3. stage 1's time ----
stub=$tmp/stub3
mkdir -p "$stub"
for s in $all_steps; do stand "$s" "echo \"$s stand-in ran\""; done
stand build 'exec sleep 600'
dry "$tmp/out3" DEVICE_CHECK_STAGE1_S=6 DEVICE_CHECK_BUDGET_S=6
[ "$rc" = 1 ] || fail "stage time: exit $rc, not 1"
expect "^FAIL  stage 1  build +[3-9]s  timed out after [3-6]s \(killed\)$"
for s in test_cuda test_cuda_pair device-unit gpu-python copybw; do
  expect "^SKIP  stage 1  $s +[0-9]+s  stage 1's build failed$"
done
expect "^FAIL  stage 2  staged-gloo-np4 +[0-9]+s  not run: stage 2's time was spent$"
[ "$(tail -1 "$out/summary.txt")" = "3 passed, 2 failed, 13 skipped" ] ||
  fail "stage time: last line '$(tail -1 "$out/summary.txt")'"
echo "device-check dry run: 3 scenarios as expected"
