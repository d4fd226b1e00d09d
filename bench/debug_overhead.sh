#!/usr/bin/env bash
# What parallel.debug: detail costs (comm: Note [Collective checks]): data_parallel on 2 gloo ranks,
# a small mlp on synthetic 1x28x28 images, off and detail alternating within each round (A B A B).
# Prints "round mode samples/s" lines and the detail / off ratio of the medians.
#   bench/debug_overhead.sh [BUILD_DIR=build] [ROUNDS=2] [STEPS=200] [BATCH=64]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-2}
STEPS=${3:-200}
BATCH=${4:-64}
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for round in $(seq "$ROUNDS"); do
  for mode in off detail; do
    "$BUILD/bin/dtrain" train configs/quickstart.yaml "out_dir=$work/runs" --nproc 2 parallel.backend=gloo \
      "parallel.debug=$mode" data.dataset=synthetic "data.synthetic_shape=[1,28,28]" data.synthetic_size=8192 \
      data.test_subset_size=256 model.name=mlp "model.hidden=[256,128]" "data.batch_size=$BATCH" \
      "train.max_steps=$STEPS" train.epochs=100 train.eval_every_epochs=0 train.checkpoint_every_epochs=0 \
      train.threads=1 2>"$work/err" | tail -n 1 |
      $PY -c "import json,sys; r=json.load(sys.stdin); print('$round $mode', round(r['samples_per_second'], 1))" |
      tee -a "$work/rows" || { tail -n 20 "$work/err"; exit 1; }
  done
done
$PY - "$work/rows" <<'PYEOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {m: statistics.median(float(v) for _, q, v in rows if q == m) for m in ("off", "detail")}
print(f"median samples/s: off {med['off']:.1f}, detail {med['detail']:.1f}, detail / off {med['detail'] / med['off']:.2f}x")
PYEOF
