#!/usr/bin/env bash
# Training throughput and accuracy: dtrain against PyTorch DDP over Gloo (Debian's python3-torch),
# Fashion-MNIST, batch 64 per worker, SGD with momentum, one thread per worker, the same epochs.
# Runs alternate A B A B in rounds; the table gives medians, ratios and scaling efficiencies, and
# the ceiling this host allows: two independent local runs at once, which communicate nothing.
# "ceiling vs DDP" is that ceiling over DDP's samples/s: the most a 2-worker dtrain run could give
# against DDP in that round, however little it spent communicating.
#   bench/train_compare.sh [BUILD_DIR=build] [ROUNDS=2] [EPOCHS=1] [MODELS="mlp lenet5"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-2}
EPOCHS=${3:-1}
MODELS=${4:-"mlp lenet5"}
# DTRAIN: another program running dtrain's command line (a program of one's own: examples/own_cli.cpp).
DTRAIN=${DTRAIN:-$BUILD/bin/dtrain}
PY=/usr/bin/python3  # Debian's, which has torch
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl

dtrain_run() {  # label model nproc overrides...
  local label=$1 model=$2 nproc=$3
  shift 3
  "$DTRAIN" train "configs/bench/fmnist_$model.yaml" --nproc "$nproc" "out_dir=$work/runs" "train.epochs=$EPOCHS" \
    "$@" 2>"$work/last.err" | tail -n 1 |
    $PY -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'impl':'$label','model':'$model',
'workers':r['world_size'],'samples_per_second':r['samples_per_second'],'test_top1':r['final']['top1']}))" >>"$results" ||
    { echo "dtrain run $label $model failed:"; tail -n 20 "$work/last.err"; exit 1; }
}
pair_run() {  # model: two independent one-thread local runs at once, no communication at all. Their
  # summed throughput over twice one run's is the scaling efficiency this host allows (the ceiling).
  local model=$1 i
  for i in 1 2; do
    "$DTRAIN" train "configs/bench/fmnist_$model.yaml" "out_dir=$work/runs" "train.epochs=$EPOCHS" train.threads=1 \
      parallel.strategy=local 2>"$work/pair$i.err" | tail -n 1 >"$work/pair$i.json" &
  done
  wait
  $PY - "$model" "$work/pair1.json" "$work/pair2.json" >>"$results" <<'PYEOF' ||
import json, sys
total = sum(json.load(open(p))["samples_per_second"] for p in sys.argv[2:])
print(json.dumps({"impl": "local-pair", "model": sys.argv[1], "workers": 2, "samples_per_second": total,
                  "test_top1": float("nan")}))
PYEOF
    { echo "local pair $model failed:"; tail -n 20 "$work/pair1.err" "$work/pair2.err"; exit 1; }
}
peer_run() {  # model workers
  $PY bench/peer/ddp_peer.py --model "$1" --workers "$2" --threads 1 --epochs "$EPOCHS" 2>"$work/last.err" |
    tail -n 1 >>"$results" || { echo "peer run failed:"; tail -n 20 "$work/last.err"; exit 1; }
}

for round in $(seq "$ROUNDS"); do
  for model in $MODELS; do
    echo "round $round/$ROUNDS: $model" >&2
    peer_run "$model" 1
    dtrain_run dtrain "$model" 1 parallel.strategy=local
    peer_run "$model" 2
    dtrain_run dtrain-default "$model" 2
    dtrain_run dtrain-gloo "$model" 2 parallel.backend=gloo
    dtrain_run dtrain-mpi "$model" 2 parallel.backend=mpi
    pair_run "$model"
  done
done

$PY - "$results" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(impl, model, workers, key="samples_per_second"):
    v = [r[key] for r in rows if r["impl"] == impl and r["model"] == model and r["workers"] == workers]
    return statistics.median(v) if v else float("nan")
print("| model | run | workers | samples/s (median) | test top-1 | vs peer | scaling eff. |")
print("|---|---|---|---|---|---|---|")
for model in sorted({r["model"] for r in rows}):
    p1, d1 = med("pytorch", model, 1), med("dtrain", model, 1)
    p2 = med("pytorch-ddp", model, 2)
    print(f"| {model} | pytorch | 1 | {p1:.0f} | {med('pytorch', model, 1, 'test_top1'):.4f} | 1.00 | |")
    print(f"| {model} | dtrain local | 1 | {d1:.0f} | {med('dtrain', model, 1, 'test_top1'):.4f} | {d1/p1:.2f} | |")
    print(f"| {model} | pytorch-ddp | 2 | {p2:.0f} | {med('pytorch-ddp', model, 2, 'test_top1'):.4f} | 1.00 | {p2/(2*p1):.2f} |")
    for impl in ("dtrain-default", "dtrain-gloo", "dtrain-mpi"):
        d2 = med(impl, model, 2)
        print(f"| {model} | {impl} | 2 | {d2:.0f} | {med(impl, model, 2, 'test_top1'):.4f} | {d2/p2:.2f} | {d2/(2*d1):.2f} |")
    pair = med("local-pair", model, 2)
    # The ceiling against DDP: what dtrain would reach if communicating cost nothing, so a "vs peer"
    # goal above it cannot be met on the host as it was.
    print(f"| {model} | two independent local runs (ceiling) | 2 | {pair:.0f} | | {pair/p2:.2f} | {pair/(2*d1):.2f} |")

# Round by round, each ratio against the same round's runs: how far the host moves.
def series(impl, model):
    return [r["samples_per_second"] for r in rows if r["impl"] == impl and r["model"] == model]
print()
print("| model | round | peer 1 | dtrain 1 | 1-thread ratio | default vs DDP | gloo vs DDP | mpi vs DDP | ceiling vs DDP | mpi scaling eff. | ceiling |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for model in sorted({r["model"] for r in rows}):
    cols = [series(i, model) for i in ("pytorch", "dtrain", "pytorch-ddp", "dtrain-default", "dtrain-gloo", "dtrain-mpi", "local-pair")]
    for n, (p1, d1, p2, a2, g2, m2, pair) in enumerate(zip(*cols), 1):
        print(f"| {model} | {n} | {p1:.0f} | {d1:.0f} | {d1/p1:.2f} | {a2/p2:.2f} | {g2/p2:.2f} | {m2/p2:.2f} | {pair/p2:.2f} | {m2/(2*d1):.2f} | {pair/(2*d1):.2f} |")
PYEOF
