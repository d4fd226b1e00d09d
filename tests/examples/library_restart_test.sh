#!/usr/bin/env bash
# The trainer as a library restarted by its launcher (tests/examples/library_restart.cpp): the
# first attempt fails at step 25, the restart continues from the checkpoint of step 20 in the same
# run folder, and the run ends with the uninterrupted run's steps, loss and accuracy.
#   tests/examples/library_restart_test.sh DTRAIN PROGRAM
set -euo pipefail
dtrain=$(readlink -f "${1:?the dtrain tool}")
program=$(readlink -f "${2:?the library_restart program}")
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-library-restart-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

"$dtrain" launch --nproc-per-node 2 --threads 1 -- "$program" whole >whole.out 2>whole.err ||
  fail "the uninterrupted run failed: $(tail -5 whole.err)"
"$dtrain" launch --nproc-per-node 2 --threads 1 --max-restarts 1 -- "$program" restarted fail >restarted.out 2>restarted.err ||
  fail "the restarted run failed: $(tail -5 restarted.err)"
grep -q "the test's failure at step 25" restarted.err || fail "the first attempt did not fail: $(cat restarted.err)"
grep -q "restart 1: continuing from the latest checkpoint" restarted.err || fail "the restart did not continue from a checkpoint"
grep -q "resumed from restarted at step 20" restarted.err || fail "the restart did not resume at step 20: $(cat restarted.err)"
for key in "['steps']" "['final']['loss']" "['final']['top1']"; do
  a=$(field whole/results.json "$key")
  b=$(field restarted/results.json "$key")
  [ "$a" = "$b" ] || fail "the restarted run's $key is $b, the uninterrupted run's $a"
done
echo "PASS: the library's run, failed at step 25 and restarted, ends as the uninterrupted one"
