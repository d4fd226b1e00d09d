#!/usr/bin/env bash
# data_parallel's gradient compressions side by side: plain float32 all-reduce, fp16 on the wire and
# PowerSGD at ranks 1, 2 and 4 (parallel.data_parallel.compression), on resnet18 with CIFAR-shaped
# synthetic data (3 x 32 x 32, 10 classes), 2 ranks over gloo: bytes per step, time per step and its
# split, and top-1 after the same steps. RATES: "none" runs both ranks on this host over loopback; a
# rate runs one rank in each of two network namespaces joined by a link of that rate (bench/netns.sh;
# needs root). START is powersgd_start_step (plain steps first; 0 so that bytes per step is PowerSGD's
# own; the accuracy study sets about STEPS/10). Prints one JSON line per run on stderr and a Markdown
# table on stdout. Measure on an idle machine: timings on a shared one are noise.
#   bench/powersgd_compare.sh [BUILD_DIR=build] [RATES="none 1gbit 100mbit"] [STEPS=100] [BATCH=32] [ROUNDS=1]
#   METHODS="none fp16 powersgd1 powersgd2 powersgd4" START=0 SIZE=2048 (environment)
# DATA=fmnist (environment) trains on Fashion-MNIST instead (1 x 28 x 28, top-1 on the first
# TEST_SUBSET=2000 test images; 0: all 10,000): synthetic images carry no signal, so the accuracy study uses real data.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RATES=${2:-"none 1gbit 100mbit"}
STEPS=${3:-100}
BATCH=${4:-32}
ROUNDS=${5:-1}
START=${START:-0}
SIZE=${SIZE:-2048}
DATA=${DATA:-synthetic}
DTRAIN=$(readlink -f "$BUILD/bin/dtrain")
PY=/usr/bin/python3
[ -x "$DTRAIN" ] || { echo "powersgd_compare.sh: no $BUILD/bin/dtrain; build it first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl

method_args() {  # method
  case $1 in
    none) echo "parallel.data_parallel.compression=none" ;;
    fp16) echo "parallel.data_parallel.compression=fp16" ;;
    bf16) echo "parallel.data_parallel.compression=bf16" ;;
    powersgd*) echo "parallel.data_parallel.compression=powersgd parallel.data_parallel.powersgd_rank=${1#powersgd}" \
                    "parallel.data_parallel.powersgd_start_step=$START" ;;
    *) echo "powersgd_compare.sh: unknown method $1" >&2; exit 2 ;;
  esac
}

run() {  # rate method
  local rate=$1 method=$2 out=$work/$1-$2
  mkdir -p "$out"
  local args="configs/bench/fmnist_mlp.yaml name=powersgd_bench out_dir=$out/runs"
  case $DATA in
    synthetic) args="$args data.dataset=synthetic data.synthetic_shape=[3,32,32] data.synthetic_classes=10"
               args="$args data.synthetic_size=$SIZE" ;;
    fmnist) args="$args data.dataset=fashion-mnist data.test_subset_size=${TEST_SUBSET:-2000}" ;;
    *) echo "powersgd_compare.sh: DATA is synthetic or fmnist, not $DATA" >&2; exit 2 ;;
  esac
  args="$args data.batch_size=$BATCH model.name=resnet18 model.stem=cifar"
  args="$args train.max_steps=$STEPS train.epochs=1000 train.eval_every_epochs=1000 train.threads=1"
  args="$args parallel.strategy=data_parallel $(method_args "$method")"
  if [ "$rate" = none ]; then
    # shellcheck disable=SC2086
    "$DTRAIN" train $args --nproc 2 >"$out/h0.log" 2>"$out/err" || { tail -n 20 "$out/err"; exit 1; }
  else
    # shellcheck disable=SC2016
    bench/netns.sh run 2 --rate "$rate" --timeout 3600 --log-dir "$out" -- sh -c '
      exec "$0" launch --nnodes 2 --node-rank "$HOST_INDEX" --nproc-per-node 1 --threads 1 \
        --master-addr "$MASTER_ADDR" --master-port 29500 --log-dir "$1/ranks-h$HOST_INDEX" -- "$0" train '"$args" \
      "$DTRAIN" "$out" 2>"$out/err" || { tail -n 20 "$out/err" "$out"/h*.log; exit 1; }
  fi
  grep -h '^{' "$out/h0.log" | tail -n 1 | $PY -c "
import json, sys
r = json.load(sys.stdin)
steps = r['steps']
row = {'rate': '$rate', 'method': '$method', 'steps': steps,
       'bytes_per_step': r['bytes_per_step'],  # the training step's own wire bytes, per rank
       'step_ms': 1e3 * $BATCH * r['world_size'] / r['samples_per_second'],  # after the trainer's warm-up
       'top1': r['final']['top1'], 'notes': r.get('strategy_notes', {})}
for k, v in (r.get('step_time') or {}).items():
    row[k] = v
print(json.dumps(row))" | tee -a "$results" >&2
}

for round in $(seq "$ROUNDS"); do
  for rate in $RATES; do
    for method in ${METHODS:-none fp16 powersgd1 powersgd2 powersgd4}; do
      echo "round $round: $rate $method" >&2
      run "$rate" "$method"
    done
  done
done

$PY - "$results" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(rate, method, key):
    v = [r[key] for r in rows if (r["rate"], r["method"]) == (rate, method) and key in r]
    return statistics.median(v) if v else float("nan")
print("| link | method | bytes/step | fewer than none | ms/step | speed-up vs none | top-1 | forward / backward / comm / update ms |")
print("|---|---|---|---|---|---|---|---|")
for rate in dict.fromkeys(r["rate"] for r in rows):
    b0, t0 = med(rate, "none", "bytes_per_step"), med(rate, "none", "step_ms")
    for method in dict.fromkeys(r["method"] for r in rows):
        b, t = med(rate, method, "bytes_per_step"), med(rate, method, "step_ms")
        split = " / ".join(f"{1e3 * med(rate, method, k):.1f}" for k in ("forward_s", "backward_s", "comm_s", "update_s"))
        print(f"| {'loopback' if rate == 'none' else rate} | {method} | {b:,.0f} | {b0 / b:.1f}x | {t:.1f} | "
              f"{t0 / t:.2f}x | {med(rate, method, 'top1'):.4f} | {split} |")
PYEOF
