#!/usr/bin/env bash
# dSGD (data_parallel), dAD, rank-dAD (r = 4) and rank-dAD with parallel.dad.auto, side by side:
# bytes per step, time per step and its split, and test accuracy after the same steps, on an mlp
# with a 1024-wide hidden layer and a small vision transformer, 2 ranks over gloo. RATES: "none" runs
# both ranks on this host over loopback; a rate runs one rank in each of two network namespaces
# joined by a link of that rate (bench/netns.sh; needs root). Runs alternate method by method
# within each round. Time per step is after the trainer's warm-up steps, which cover auto's trial of
# its plans. Prints one JSON line per run on stderr and a Markdown table on stdout.
# METHODS (environment) picks the methods: rankdad is rank 4, rankdadR rank R.
#   bench/dad_compare.sh [BUILD_DIR=build] [RATES="none 1gbit 100mbit"] [STEPS=200] [MODELS="mlp vit"] [ROUNDS=1]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RATES=${2:-"none 1gbit 100mbit"}
STEPS=${3:-200}
MODELS=${4:-"mlp vit"}
ROUNDS=${5:-1}
DTRAIN=$(readlink -f "$BUILD/bin/dtrain")
PY=/usr/bin/python3
[ -x "$DTRAIN" ] || { echo "dad_compare.sh: no $BUILD/bin/dtrain; build it first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl

model_args() {  # model
  case $1 in
    mlp) echo "model.name=mlp model.hidden=[1024]" ;;
    vit) echo "model.name=vit model.patch=7 model.dim=64 model.depth=2 model.heads=4" ;;
  esac
}
method_args() {  # method
  case $1 in
    dsgd) echo "parallel.strategy=dsgd" ;;
    dad) echo "parallel.strategy=dad" ;;
    rankdad) echo "parallel.strategy=rankdad parallel.dad.rank=4" ;;
    rankdad*) echo "parallel.strategy=rankdad parallel.dad.rank=${1#rankdad}" ;;
    auto) echo "parallel.strategy=rankdad parallel.dad.rank=4 parallel.dad.auto=true" ;;
  esac
}

run() {  # rate model method
  local rate=$1 model=$2 method=$3 out=$work/$1-$2-$3
  mkdir -p "$out"
  local args="configs/bench/fmnist_mlp.yaml out_dir=$out/runs train.max_steps=$STEPS train.epochs=100"
  args="$args data.test_subset_size=0 train.eval_every_epochs=1000 train.threads=1"
  args="$args $(model_args "$model") $(method_args "$method")"
  if [ "$rate" = none ]; then
    # shellcheck disable=SC2086
    "$DTRAIN" train $args --nproc 2 >"$out/h0.log" 2>"$out/err" || { tail -n 20 "$out/err"; exit 1; }
  else
    # shellcheck disable=SC2016
    bench/netns.sh run 2 --rate "$rate" --timeout 1200 --log-dir "$out" -- sh -c '
      exec "$0" launch --nnodes 2 --node-rank "$HOST_INDEX" --nproc-per-node 1 --threads 1 \
        --master-addr "$MASTER_ADDR" --master-port 29500 --log-dir "$1/ranks-h$HOST_INDEX" -- "$0" train '"$args" \
      "$DTRAIN" "$out" 2>"$out/err" || { tail -n 20 "$out/err" "$out"/h*.log; exit 1; }
  fi
  grep -h '^{' "$out/h0.log" | tail -n 1 | $PY -c "
import json, sys
r = json.load(sys.stdin)
steps = r['steps']
row = {'rate': '$rate', 'model': '$model', 'method': '$method', 'steps': steps,
       'bytes_per_step': r['bytes_per_step'],  # the training step's own wire bytes, per rank
       # after the trainer's warm-up (min(10, steps / 10) steps, which covers auto's trial of its plans)
       'step_ms': 1e3 * 64 * r['world_size'] / r['samples_per_second'],
       'run_ms': 1e3 * r['train_seconds'] / steps, 'top1': r['final']['top1'],
       'samples_per_second': r['samples_per_second'], 'notes': r.get('strategy_notes', {})}
for k, v in (r.get('step_time') or {}).items():
    row[k] = v
print(json.dumps(row))" | tee -a "$results" >&2
}

for round in $(seq "$ROUNDS"); do
  for rate in $RATES; do
    for model in $MODELS; do
      for method in ${METHODS:-dsgd dad rankdad auto}; do
        echo "round $round: $rate $model $method" >&2
        run "$rate" "$model" "$method"
      done
    done
  done
done

$PY - "$results" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def kept(rate, model, method):
    notes = [r["notes"].get("dad/auto", "") for r in rows if (r["rate"], r["model"], r["method"]) == (rate, model, method)]
    return notes[-1].split("; kept ")[-1] if notes and notes[-1] else ""
def med(rate, model, method, key):
    v = [r[key] for r in rows if (r["rate"], r["model"], r["method"]) == (rate, model, method) and key in r]
    return statistics.median(v) if v else float("nan")
print("| link | model | method | bytes/step | vs dsgd | ms/step | speed-up vs dsgd | top-1 | forward / backward / comm / update ms | auto kept |")
print("|---|---|---|---|---|---|---|---|---|---|")
for rate in dict.fromkeys(r["rate"] for r in rows):
    for model in dict.fromkeys(r["model"] for r in rows):
        b0, t0 = med(rate, model, "dsgd", "bytes_per_step"), med(rate, model, "dsgd", "step_ms")
        for method in dict.fromkeys(r["method"] for r in rows):
            b, t = med(rate, model, method, "bytes_per_step"), med(rate, model, method, "step_ms")
            split = " / ".join(f"{1e3 * med(rate, model, method, k):.1f}" for k in ("forward_s", "backward_s", "comm_s", "update_s"))
            print(f"| {'loopback' if rate == 'none' else rate} | {model} | {method} | {b:,.0f} | {b0 / b:.1f}x | {t:.1f} | "
                  f"{t0 / t:.2f}x | {med(rate, model, method, 'top1'):.4f} | {split} | {kept(rate, model, method)} |")
PYEOF
