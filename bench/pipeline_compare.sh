#!/usr/bin/env bash
# Pipeline parallel (gpipe) against its PyTorch peer, a hand-written GPipe in python3-torch 1.13
# (bench/peer/pipeline_peer.py: one process per stage, Gloo send/recv): the same mlp cut at the same
# layers, the same batch and micro-batches, SGD, one thread per stage, the same steps. Runs alternate
# A B A B within each round: dtrain over gloo (the peer's transport), dtrain with the default
# backend (parallel.backend: auto, shared memory on one host), the peer. Prints each run as a JSON
# line, then a table of median samples/s and each round's ratio to the same round's peer.
#   bench/pipeline_compare.sh [BUILD_DIR=build] [ROUNDS=3] [STEPS=30] [BATCH=1024]
#     [HIDDEN=[2048,2048,2048,2048,2048,2048,2048]] [SHAPE=[1,8,8]] [CUT=9] [MICRO="1 4 8"]
# CUT is the first layer of stage 1 (parallel.pipeline.cut_points; the mlp's layers are Flatten,
# then Linear and ReLU per hidden width, then the output Linear): 9 gives each stage three
# 2048x2048 Linears (stage 0 also the 64-input first layer, stage 1 the 10-class last), equal
# forward and backward passes as bench/pipeline_bubble.sh's balanced run has them. Check it runs on tiny sizes: bench/pipeline_compare.sh build 1 3 16 '[8,8]' '[1,4,4]' 3 '2'
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
STEPS=${3:-30}
BATCH=${4:-1024}
HIDDEN=${5:-[2048,2048,2048,2048,2048,2048,2048]}
SHAPE=${6:-[1,8,8]}
CUT=${7:-9}
MICRO=${8:-"1 4 8"}
PY=/usr/bin/python3
DTRAIN="$BUILD/bin/dtrain"
[ -x "$DTRAIN" ] || { echo "pipeline_compare.sh: no $DTRAIN; build it first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl

dtrain_run() {  # round micro backend
  rm -rf "$work/runs"
  "$DTRAIN" train "out_dir=$work/runs" nproc=2 parallel.strategy=pipeline "parallel.backend=$3" \
    parallel.pipeline.schedule=gpipe parallel.pipeline.stages=2 parallel.pipeline.balance=cut_points \
    "parallel.pipeline.cut_points=[$CUT]" \
    "parallel.pipeline.micro_batches=$2" data.dataset=synthetic "data.synthetic_shape=$SHAPE" \
    data.synthetic_size=100000 data.test_subset_size=64 "data.batch_size=$((BATCH / 2))" \
    model.name=mlp "model.hidden=$HIDDEN" optim.name=sgd optim.lr=0.01 "train.max_steps=$STEPS" \
    train.epochs=1000 train.eval_every_epochs=0 train.checkpoint_every_epochs=0 train.threads=1 \
    2>"$work/err" | grep '^{' | tail -n 1 >"$work/last" || { tail -n 20 "$work/err" >&2; exit 1; }
  $PY -c "
import json
r = json.load(open('$work/last'))
print(json.dumps({'round': $1, 'micro': $2, 'impl': 'dtrain-$3', 'samples_per_second': r['samples_per_second']}))"
}

peer_run() {  # round micro
  $PY bench/peer/pipeline_peer.py --hidden "$HIDDEN" --shape "$SHAPE" --cut "$CUT" --batch "$BATCH" \
    --micro-batches "$2" --steps "$STEPS" --threads 1 2>"$work/err" >"$work/last" ||
    { tail -n 20 "$work/err" >&2; exit 1; }
  $PY -c "
import json
r = json.load(open('$work/last'))
print(json.dumps({'round': $1, 'micro': $2, 'impl': 'pytorch-gpipe', 'samples_per_second': r['samples_per_second']}))"
}

for round in $(seq "$ROUNDS"); do
  for micro in $MICRO; do
    echo "round $round/$ROUNDS, M=$micro" >&2
    dtrain_run "$round" "$micro" gloo | tee -a "$results"
    dtrain_run "$round" "$micro" auto | tee -a "$results"
    peer_run "$round" "$micro" | tee -a "$results"
  done
done

$PY - "$results" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print("| M | implementation | samples/s (median) | vs the PyTorch peer (median of rounds) | per round |")
print("|---|---|---|---|---|")
for micro in dict.fromkeys(r["micro"] for r in rows):
    peer = {r["round"]: r["samples_per_second"] for r in rows if r["micro"] == micro and r["impl"] == "pytorch-gpipe"}
    for impl in dict.fromkeys(r["impl"] for r in rows):
        mine = {r["round"]: r["samples_per_second"] for r in rows if r["micro"] == micro and r["impl"] == impl}
        ratios = [v / peer[k] for k, v in mine.items()]
        print(f"| {micro} | {impl} | {statistics.median(mine.values()):.0f} | {statistics.median(ratios):.2f}x | "
              f"{', '.join(f'{x:.2f}' for x in ratios)} |")
PYEOF
