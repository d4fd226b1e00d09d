#!/usr/bin/env bash
# train.activation_checkpointing: peak memory and step time of none, selective and full on one transformer,
# one process, synthetic image rows as tokens, the modes alternating within each round (A B C A B C). The
# peak is the process's maximum resident set (getrusage of the child); the model, data and optimizer state
# are the same in each mode, so the difference is the activations kept for backward. Prints "round mode
# peak_MB step_s" lines, then the medians and each mode's ratios to none.
#   bench/activation_memory.sh [BUILD_DIR=build] [ROUNDS=2] [DEPTH=6] [DIM=128] [TOKENS=128] [BATCH=64]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-2}
DEPTH=${3:-6}
DIM=${4:-128}
TOKENS=${5:-128}
BATCH=${6:-64}
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for round in $(seq "$ROUNDS"); do
  for mode in none selective full; do
    $PY - "$round" "$mode" "$work" "$BUILD/bin/dtrain" train configs/quickstart.yaml "out_dir=$work/runs" nproc=1 \
      parallel.strategy=local data.dataset=synthetic "data.synthetic_shape=[1,$TOKENS,64]" \
      "data.synthetic_size=$((BATCH * 4))" "data.batch_size=$BATCH" train.eval_every_epochs=0 train.epochs=1 \
      train.max_steps=4 train.threads=2 model.name=transformer "model.dim=$DIM" model.heads=4 "model.depth=$DEPTH" \
      "train.activation_checkpointing=$mode" <<'PYEOF' | tee -a "$work/rows"
import json, resource, subprocess, sys
round_, mode, work, *command = sys.argv[1:]
with open(f"{work}/err", "w") as err:
    out = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, text=True)
if out.returncode != 0:
    sys.exit(open(f"{work}/err").read()[-2000:])
r = json.loads(out.stdout.strip().splitlines()[-1])
t = r["step_time"]
step = t["forward_s"] + t["backward_s"] + t["update_s"]
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(round_, mode, f"{peak:.0f}", f"{step:.3f}", r["final"]["loss"])
PYEOF
  done
done
$PY - "$work/rows" <<'PYEOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
modes = ("none", "selective", "full")
peak = {m: statistics.median(float(r[2]) for r in rows if r[1] == m) for m in modes}
step = {m: statistics.median(float(r[3]) for r in rows if r[1] == m) for m in modes}
losses = {r[4] for r in rows}
for m in modes:
    print(f"{m}: peak {peak[m]:.0f} MB ({peak[m] / peak['none']:.2f}x none), step {step[m]:.3f} s "
          f"({step[m] / step['none']:.2f}x none)")
print("final losses equal in every run:", len(losses) == 1)
PYEOF
