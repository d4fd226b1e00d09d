#!/usr/bin/env bash
# A program's own model and data set through dtrain's command line (examples/own_cli.cpp): listed in
# train --help; trained on two workers by `train`; continued by `--resume` from a mid-run checkpoint
# to the same final weights and metrics as the uninterrupted run; run by `experiment` (two
# strategies) and `report`, and timed by `bench throughput`. The workers are the program itself.
#   tests/examples/own_cli_test.sh PROGRAM
set -euo pipefail
app=$(readlink -f "${1:?the example_own_cli program}")
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-own-cli-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

"$app" train --help >help.txt
grep -q "^  blobnet " help.txt || fail "train --help does not list the model blobnet"
grep -q "^  blobs " help.txt || fail "train --help does not list the data set blobs"

common=(model.name=blobnet data.dataset=blobs data.batch_size=32 optim.lr=0.1 optim.momentum=0.9 train.epochs=2
        train.log_every_steps=10 run_folder=named out_dir=runs parallel.strategy=zero parallel.zero.stage=3)
"$app" train "${common[@]}" name=whole --nproc 2 >whole.out 2>whole.err || {
  cat whole.err
  fail "train on two workers failed"
}
top1=$(field runs/whole/results.json "['final']['top1']")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.9 else 1)" "$top1" || fail "top-1 $top1 after 2 epochs, expected > 0.9"

# A copy of the run cut back to its checkpoint after epoch 1 and continued (--resume continues in
# the run's own folder) ends where the uninterrupted run ended.
cp -r runs/whole runs/resumed
rm runs/resumed/results.json runs/resumed/checkpoints/latest "$(ls runs/resumed/checkpoints/*.ckpt | sort | tail -n 1)"
"$app" train "${common[@]}" name=resumed --nproc 2 --resume runs/resumed >resumed.out 2>resumed.err || {
  cat resumed.err
  fail "train --resume runs/resumed failed"
}
grep -q "resumed from runs/resumed at step 31" resumed.err || fail "the run did not resume at step 31: $(cat resumed.err)"
for key in "['final']['top1']" "['final']['loss']" "['steps']" "['final']['f1']"; do
  a=$(field runs/whole/results.json "$key")
  b=$(field runs/resumed/results.json "$key")
  [ "$a" = "$b" ] || fail "resumed run's $key is $b, the uninterrupted run's $a"
done

cat >base.yaml <<YAML
model: {name: blobnet}
data: {dataset: blobs, batch_size: 32}
optim: {lr: 0.1}
YAML
cat >exp.yaml <<YAML
name: blobs
out_dir: runs/experiments
base: base.yaml
overrides: [nproc=2, train.epochs=1]
runs:
  - {name: dp, overrides: [parallel.strategy=data_parallel]}
  - {name: pipeline, overrides: [parallel.strategy=pipeline]}
YAML
"$app" experiment exp.yaml >exp.out 2>exp.err || {
  cat exp.err
  fail "experiment failed"
}
folder=$(ls -d runs/experiments/*_blobs | head -n 1)
for run in dp pipeline; do
  [ -f "$folder/$run/results.json" ] || fail "experiment run $run wrote no results.json"
done
"$app" report "$folder" >report.out 2>report.err || fail "report failed: $(cat report.err)"
[ -s "$folder/report.md" ] || fail "report wrote no report.md"

"$app" bench throughput --models blobnet --batches 16 --workers 2 --steps 4 --warmup 1 \
  --set data.dataset=blobs >bench.json 2>bench.err || fail "bench throughput failed: $(tail -3 bench.err)"
grep -q '"model": *"blobnet"' bench.json || fail "bench throughput printed no blobnet point: $(cat bench.json)"
echo "PASS: blobnet and blobs through train, --resume, experiment, report and bench throughput"
