#!/usr/bin/env bash
# Training throughput of two dtrain builds on the same host, A B A B: does a change keep the speed?
# Each round runs, for every model, one-thread local training and 2-worker data_parallel over gloo
# and mpi with build A, then the same with build B; the table gives medians of B/A per round. RUNS
# adds 2-worker zero (stage 3 by default, as a configuration's `parallel.strategy: zero`) and a
# 2-stage pipeline over gloo to those three: zero-2 and pipeline-2.
#   bench/build_compare.sh BUILD_A BUILD_B [ROUNDS=3] [EPOCHS=1] [MODELS="mlp lenet5"] [RUNS="local-1 gloo-2 mpi-2"]
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
ROUNDS=${3:-3}
EPOCHS=${4:-1}
MODELS=${5:-"mlp lenet5"}
RUNS=${6:-"local-1 gloo-2 mpi-2"}
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl

run() {  # build label model nproc overrides...
  local build=$1 label=$2 model=$3 nproc=$4
  shift 4
  "$build/bin/dtrain" train "configs/bench/fmnist_$model.yaml" --nproc "$nproc" "out_dir=$work/runs" \
    "train.epochs=$EPOCHS" train.threads=1 "$@" 2>"$work/last.err" | tail -n 1 |
    $PY -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'build':'$build','run':'$label',
'model':'$model','samples_per_second':r['samples_per_second'],'top1':r['final']['top1']}))" >>"$results" ||
    { echo "run $build $label $model failed:"; tail -n 20 "$work/last.err"; exit 1; }
}

for round in $(seq "$ROUNDS"); do
  for model in $MODELS; do
    for build in "$A" "$B"; do
      echo "round $round/$ROUNDS: $model $build" >&2
      for label in $RUNS; do
        case $label in
          local-1) run "$build" local-1 "$model" 1 parallel.strategy=local ;;
          gloo-2) run "$build" gloo-2 "$model" 2 parallel.backend=gloo ;;
          mpi-2) run "$build" mpi-2 "$model" 2 parallel.backend=mpi ;;
          zero-2) run "$build" zero-2 "$model" 2 parallel.backend=gloo parallel.strategy=zero ;;
          pipeline-2) run "$build" pipeline-2 "$model" 2 parallel.backend=gloo parallel.strategy=pipeline \
            parallel.pipeline.stages=2 ;;
          *) echo "build_compare.sh: unknown run $label (local-1 gloo-2 mpi-2 zero-2 pipeline-2)" >&2; exit 1 ;;
        esac
      done
    done
  done
done

$PY - "$results" "$A" "$B" "$RUNS" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
a, b = sys.argv[2], sys.argv[3]
print(f"| model | run | A samples/s | B samples/s | B/A per round | B/A median | A top-1 | B top-1 |")
print("|---|---|---|---|---|---|---|---|")
for model in sorted({r["model"] for r in rows}):
    for run in sys.argv[4].split():
        sa = [r for r in rows if r["build"] == a and r["model"] == model and r["run"] == run]
        sb = [r for r in rows if r["build"] == b and r["model"] == model and r["run"] == run]
        ratios = [y["samples_per_second"] / x["samples_per_second"] for x, y in zip(sa, sb)]
        med = lambda v: statistics.median(v)
        print(f"| {model} | {run} | {med([r['samples_per_second'] for r in sa]):.0f} | "
              f"{med([r['samples_per_second'] for r in sb]):.0f} | {' '.join(f'{x:.2f}' for x in ratios)} | "
              f"{med(ratios):.2f} | {sa[0]['top1']:.4f} | {sb[0]['top1']:.4f} |")
PYEOF
