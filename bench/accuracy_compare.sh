#!/usr/bin/env bash
# Test accuracy after the same epochs: dtrain (data_parallel over gloo) against PyTorch DDP over
# Gloo, 2 workers, batch 64 per worker, SGD with momentum, on Fashion-MNIST, over several seeds.
# The two draw initial weights and data order from different generators, so one run each compares
# two samples of seed noise; the mean over seeds is the comparison, with the spread beside it.
#   bench/accuracy_compare.sh [BUILD_DIR=build] [SEEDS=5] [EPOCHS=3] [MODELS="mlp lenet5"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SEEDS=${2:-5}
EPOCHS=${3:-3}
MODELS=${4:-"mlp lenet5"}
PY=/usr/bin/python3  # Debian's, which has torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl

for seed in $(seq 0 $((SEEDS - 1))); do
  for model in $MODELS; do
    echo "seed $seed: $model" >&2
    $PY bench/peer/ddp_peer.py --model "$model" --workers 2 --threads 1 --epochs "$EPOCHS" --seed "$seed" \
      2>"$work/last.err" | tail -n 1 >>"$results" || { echo "peer failed:"; tail -n 20 "$work/last.err"; exit 1; }
    "$BUILD/bin/dtrain" train "configs/bench/fmnist_$model.yaml" --nproc 2 "out_dir=$work/runs" \
      "train.epochs=$EPOCHS" "train.seed=$seed" parallel.backend=gloo 2>"$work/last.err" | tail -n 1 |
      $PY -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'impl':'dtrain','model':'$model',
'seed':$seed,'test_top1':r['final']['top1']}))" >>"$results" ||
      { echo "dtrain failed:"; tail -n 20 "$work/last.err"; exit 1; }
  done
done

$PY - "$results" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | run | seeds | test top-1 mean | std | min | max |")
print("|---|---|---|---|---|---|---|")
for model in sorted({r["model"] for r in rows}):
    means = {}
    for impl in ("pytorch-ddp", "dtrain"):
        v = [r["test_top1"] for r in rows if r["model"] == model and r["impl"] == impl]
        means[impl] = statistics.mean(v)
        print(f"| {model} | {impl} | {len(v)} | {statistics.mean(v):.4f} | {statistics.stdev(v) if len(v) > 1 else 0:.4f} "
              f"| {min(v):.4f} | {max(v):.4f} |")
    print(f"| {model} | difference of means (points) | | {100 * (means['dtrain'] - means['pytorch-ddp']):+.2f} | | | |")
PYEOF
