#!/usr/bin/env bash
# train.precision on the CPU: test accuracy and throughput of fp32, bf16 (autocast) and fp16 (fp16
# numerics with dynamic loss scaling) after the same epochs from the same initial weights, per model.
# The target: bf16 within 1 point of fp32's test top-1 on lenet5 after one epoch.
#   bench/precision_compare.sh [BUILD_DIR=build] [EPOCHS=1] [MODELS="lenet5"] [NPROC=1] [PRECISIONS="fp32 bf16 fp16"]
# STEPS=N (environment) stops each run after N steps (train.max_steps) instead of whole epochs.
# NPROC > 1 trains data_parallel over gloo; 1 trains the local strategy.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
EPOCHS=${2:-1}
MODELS=${3:-"lenet5"}
NPROC=${4:-1}
PRECISIONS=${5:-"fp32 bf16 fp16"}
steps=()
[ -n "${STEPS:-}" ] && steps=("train.max_steps=$STEPS")
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl
strategy=local
[ "$NPROC" -gt 1 ] && strategy=data_parallel

for model in $MODELS; do
  for precision in $PRECISIONS; do
    echo "$model: $precision" >&2
    "$BUILD/bin/dtrain" train configs/bench/fmnist_lenet5.yaml --nproc "$NPROC" "out_dir=$work/runs" \
      "model.name=$model" "train.epochs=$EPOCHS" "train.precision=$precision" "parallel.strategy=$strategy" "${steps[@]}" \
      2>"$work/last.err" | tail -n 1 >"$work/last.json" || { echo "dtrain failed:"; tail -n 20 "$work/last.err"; exit 1; }
    $PY -c "import json,sys; r=json.load(open('$work/last.json')); print(json.dumps({'model':'$model',
'precision':'$precision','top1':r['final']['top1'],'samples_per_s':r['samples_per_second'],
'skipped':r.get('skipped_steps',0),'scale':r.get('loss_scale',0)}))" >>"$results"
  done
done

$PY - "$results" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | precision | test top-1 | against fp32 (points) | samples/s | skipped steps | final loss scale |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    base = next((b["top1"] for b in rows if b["model"] == r["model"] and b["precision"] == "fp32"), None)
    diff = f"{100 * (r['top1'] - base):+.2f}" if base is not None else ""
    scale = f"{r['scale']:.0f}" if r["scale"] else ""
    print(f"| {r['model']} | {r['precision']} | {r['top1']:.4f} | {diff} | {r['samples_per_s']:.0f} | {r['skipped']} | {scale} |")
PYEOF
