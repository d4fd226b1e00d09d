#!/usr/bin/env bash
# dtrain as a library against the dtrain tool: the same run through `dtrain train` (A) and through a
# program of one's own that links dtrain's libraries and runs its command line over a model and a
# data set it registers (examples/own_cli.cpp, B), alternated A B A B in rounds; samples/s from each
# run's results.json, the medians and the ratio B / A (1 within noise: both run one trainer).
#   bench/library_compare.sh [BUILD_DIR=build] [ROUNDS=3] [MODEL=lenet5] [NPROC=2]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
MODEL=${3:-lenet5}
NPROC=${4:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for program in "$BUILD/bin/dtrain" "$BUILD/examples/example_own_cli"; do
  [ -x "$program" ] || { echo "library_compare.sh: $program is not built (scripts/build.sh)" >&2; exit 1; }
done

run() {  # label program
  "$2" train "configs/bench/fmnist_$MODEL.yaml" --nproc "$NPROC" "out_dir=$work/runs" train.epochs=1 \
    data.subset_size=20000 train.threads=1 2>"$work/last.err" | tail -n 1 |
    python3 -c "import json,sys; r=json.load(sys.stdin); print('$1', r['samples_per_second'])" >>"$work/results" ||
    { echo "run $1 failed:"; tail -n 20 "$work/last.err"; exit 1; }
}
for round in $(seq "$ROUNDS"); do
  run tool "$BUILD/bin/dtrain"
  run library "$BUILD/examples/example_own_cli"
done
python3 - "$work/results" "$MODEL" "$NPROC" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, value = line.split()
    runs.setdefault(label, []).append(float(value))
tool, library = statistics.median(runs["tool"]), statistics.median(runs["library"])
print(f"{sys.argv[2]}, {sys.argv[3]} workers, fashion-mnist 20,000 samples, samples/s per run:")
for label in ("tool", "library"):
    print(f"  {label:8s} {' '.join(f'{v:,.0f}' for v in runs[label])}  median {statistics.median(runs[label]):,.0f}")
print(f"library / tool: {library / tool:.3f}")
PY
