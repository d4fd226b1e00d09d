#!/usr/bin/env bash
# fp32 against bf16 throughput on a CIFAR-10-shaped model (the Horovod/FSDP/pipeline study's precision
# column), one process, one thread, synthetic 3x32x32 images (the pixels do not change the time), precisions
# alternating within each round (A B A B). Prints "round precision samples/s" lines and the bf16 /
# fp32 ratio.
#   bench/precision_throughput.sh [BUILD_DIR=build] [ROUNDS=2] [MODEL=resnet18] [STEPS=20] [BATCH=32]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-2}
MODEL=${3:-resnet18}
STEPS=${4:-20}
BATCH=${5:-32}
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for round in $(seq "$ROUNDS"); do
  for precision in fp32 bf16; do
    "$BUILD/bin/dtrain" train configs/bench/fmnist_lenet5.yaml "out_dir=$work/runs" nproc=1 parallel.strategy=local \
      data.dataset=synthetic "data.synthetic_shape=[3,32,32]" data.synthetic_size=2048 data.test_subset_size=256 \
      "model.name=$MODEL" model.stem=cifar "data.batch_size=$BATCH" "train.max_steps=$STEPS" train.epochs=100 \
      train.eval_every_epochs=0 train.threads=1 "train.precision=$precision" 2>"$work/err" | tail -n 1 |
      $PY -c "import json,sys; r=json.load(sys.stdin); print('$round $precision', round(r['samples_per_second'], 1))" |
      tee -a "$work/rows" || { tail -n 20 "$work/err"; exit 1; }
  done
done
$PY - "$work/rows" <<'PYEOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {p: statistics.median(float(v) for _, q, v in rows if q == p) for p in ("fp32", "bf16")}
print(f"median samples/s: fp32 {med['fp32']:.1f}, bf16 {med['bf16']:.1f}, bf16 / fp32 {med['bf16'] / med['fp32']:.2f}x")
PYEOF
