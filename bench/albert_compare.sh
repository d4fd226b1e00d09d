#!/usr/bin/env bash
# ALBERT's training throughput on the CPU: dtrain against PyTorch (Debian's python3-torch 1.13), one
# process and data parallel on two workers (PyTorch: DistributedDataParallel over Gloo). The same
# model on both sides (ALBERT base by default: H 768, E 128, 12 applications of one layer, 12 heads,
# FFN 3072; the peer is bench/peer/albert_peer.py, written in plain torch since Debian has no
# transformers package), sequences of 128 tokens of a 30,000-token vocabulary (dtrain's synthetic
# token set; the peer draws ids the same way), batch 8 per worker, AdamW (lr 2e-5, weight decay
# 0.01), fp32, one thread per worker (OMP_NUM_THREADS=1). Runs alternate A B A B in rounds; the
# tables give median samples/s (each side's trainer's, after the warm-up steps) and dtrain / PyTorch
# round by round, since the host is shared and noisy.
#   bench/albert_compare.sh [BUILD_DIR=build] [ROUNDS=2] [STEPS=8] [SIZE=base]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-2}
STEPS=${3:-8}
SIZE=${4:-base}
DTRAIN=${DTRAIN:-$BUILD/bin/dtrain}
PY=/usr/bin/python3  # Debian's, which has torch
[ -x "$DTRAIN" ] || { echo "albert_compare.sh: no $DTRAIN; build it first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Both sides: one BLAS thread per worker (Debian's torch cannot set OpenBLAS's itself).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
BATCH=8
SEQ=128
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl
: >"$results"

dtrain_run() {  # label nproc overrides...
  local label=$1 nproc=$2
  shift 2
  "$DTRAIN" train configs/albert-cola.yaml --nproc "$nproc" "out_dir=$work/runs" \
    data.dataset=synthetic data.synthetic_vocab=30000 "data.synthetic_shape=[$SEQ]" data.synthetic_classes=2 \
    data.synthetic_size=$((BATCH * 2 * (STEPS + 2))) data.test_subset_size=$BATCH "data.batch_size=$BATCH" \
    "data.eval_batch_size=$BATCH" "model.size=$SIZE" optim.name=adamw optim.lr=2e-5 optim.weight_decay=0.01 \
    train.threads=1 train.epochs=1000 "train.max_steps=$STEPS" train.eval_every_epochs=0 \
    train.log_every_steps=1000000 "$@" 2>"$work/last.err" | tail -n 1 |
    $PY -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'round':$round,'impl':'$label',
'workers':r['world_size'],'samples_per_second':r['samples_per_second'],'step_time':r.get('step_time')}))" |
    tee -a "$results" >&2 ||
    { echo "albert_compare.sh: dtrain $label failed:" >&2; tail -n 20 "$work/last.err" >&2; exit 1; }
}
peer_run() {  # workers
  $PY bench/peer/albert_peer.py --size "$SIZE" --workers "$1" --threads 1 --batch $BATCH --seq-len $SEQ \
    --steps "$STEPS" 2>"$work/last.err" | tail -n 1 |
    $PY -c "import json,sys; r=json.load(sys.stdin); r['round']=$round; print(json.dumps(r))" |
    tee -a "$results" >&2 ||
    { echo "albert_compare.sh: PyTorch on $1 worker(s) failed:" >&2; tail -n 20 "$work/last.err" >&2; exit 1; }
}

for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  peer_run 1
  dtrain_run dtrain 1 parallel.strategy=local
  peer_run 2
  dtrain_run dtrain-dp 2 parallel.strategy=data_parallel
done

$PY - "$results" "$SIZE" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def series(impl):
    return {r["round"]: r["samples_per_second"] for r in rows if r["impl"] == impl}
pairs = [("one process", "dtrain", "pytorch"), ("data parallel, 2 workers", "dtrain-dp", "pytorch-ddp")]
print(f"ALBERT {sys.argv[2]}, sequence 128, batch 8 per worker, AdamW, fp32, one thread per worker")
print()
print("| run | dtrain samples/s (median) | PyTorch samples/s (median) | dtrain / PyTorch (median) | per round |")
print("|---|---:|---:|---:|---|")
for name, ours, theirs in pairs:
    a, b = series(ours), series(theirs)
    rounds = sorted(set(a) & set(b))
    ratios = [a[k] / b[k] for k in rounds]
    print(f"| {name} | {statistics.median(a.values()):.2f} | {statistics.median(b.values()):.2f} | "
          f"{statistics.median(ratios):.2f}x | {', '.join(f'{x:.2f}' for x in ratios)} |")
d1, p1, d2, p2 = (series(i) for i in ("dtrain", "pytorch", "dtrain-dp", "pytorch-ddp"))
print()
print("scaling efficiency (2 workers over twice one process, same round): dtrain "
      + ", ".join(f"{d2[k] / (2 * d1[k]):.2f}" for k in sorted(d1) if k in d2) + "; PyTorch "
      + ", ".join(f"{p2[k] / (2 * p1[k]):.2f}" for k in sorted(p1) if k in p2))
PYEOF
