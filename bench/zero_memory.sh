#!/usr/bin/env bash
# Memory per rank of zero stages 1, 2 and 3 and data_parallel against ZeRO's accounting: an mlp of
# about 47M parameters (hidden 4096,4096,4096,2560 on 28x28 inputs) with Adam, at 2 and 4 ranks on
# this host over gloo, one process per rank (bench/zero_memory.cpp). For each run: Ψ, what
# memory_footprint() reports against ZeRO's figure (fp32 Adam: data_parallel 16Ψ, stage 1
# 4Ψ+4Ψ+8Ψ/N, stage 2 4Ψ+12Ψ/N, stage 3 16Ψ/N), and the peak resident memory per rank above the
# process's baseline (LibTorch loaded, no model yet): ru_maxrss over the whole process (it includes
# the whole model every rank builds before the strategy shards it) and the peak over the training
# steps alone, against ZeRO's figure and against it plus the buffers the strategy states (Note
# [Reused buffers]: what it reuses every step, as ZeroStrategy::buffer_bytes() reports it, stage 1
# 4(2U/N), stage 2 4(2U+2U/N), stage 3 4(4U); plus autograd's gradient of the largest parameter,
# 4W; plus Adam's two shard-sized temporaries, 4(2U/N); plus, above two ranks, gloo's cached ring
# scratch 4(2U/N); U the largest padded unit, W the largest parameter; data_parallel: Adam's two
# temporaries of the largest parameter, 4(2W)). glibc's malloc keeps freed
# blocks below its
# sliding mmap threshold (up to 32 MB) resident; MALLOC_MMAP_THRESHOLD_=131072 in the environment
# fixes the threshold, so that freed buffers leave the resident set. Runs go method by method within each round. Builds nothing: build zero_memory first
# (cmake --build BUILD --target zero_memory).
#   bench/zero_memory.sh [BUILD_DIR=build] [RANKS="2 4"] [HIDDEN=4096,4096,4096,2560] [STEPS=3] [ROUNDS=1]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RANKS=${2:-"2 4"}
HIDDEN=${3:-4096,4096,4096,2560}
STEPS=${4:-3}
ROUNDS=${5:-1}
BIN=$BUILD/bench/zero_memory
PY=/usr/bin/python3
[ -x "$BIN" ] || { echo "zero_memory.sh: no $BIN; build it: cmake --build $BUILD --target zero_memory" >&2; exit 2; }
export OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl

run() {  # ranks method
  local n=$1 method=$2 args pids=() status=0 rank port
  case $method in
    data_parallel) args="--strategy data_parallel" ;;
    zero*) args="--strategy zero --stage ${method#zero}" ;;
  esac
  port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for rank in $(seq 0 $((n - 1))); do
    # shellcheck disable=SC2086
    RANK=$rank WORLD_SIZE=$n LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$BIN" $args --hidden "$HIDDEN" --steps "$STEPS" >"$work/out.$rank" 2>"$work/err.$rank" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  [ "$status" -eq 0 ] || { echo "zero_memory.sh: $method at $n ranks failed:" >&2; tail -n 5 "$work"/err.* >&2; exit 1; }
  cat "$work"/out.* | tee -a "$results" >&2
}

for round in $(seq "$ROUNDS"); do
  for n in $RANKS; do
    for method in data_parallel zero1 zero2 zero3; do
      echo "round $round: $method at $n ranks" >&2
      run "$n" "$method"
    done
  done
done

$PY - "$results" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
MB = 2**20
def name(r):
    return "data_parallel" if r["strategy"] == "data_parallel" else f"zero stage {r['stage']}"
print("| ranks | strategy | Ψ | footprint / rank (MB) | ZeRO's figure (MB) | footprint / figure | "
      "stated buffers (MB) | peak RSS over steps − baseline (MB) | / figure | / (figure + buffers) | "
      "ru_maxrss − baseline (MB) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
keys = list(dict.fromkeys((r["world"], name(r)) for r in rows))
for world, method in keys:
    mine = [r for r in rows if (r["world"], name(r)) == (world, method)]
    # The largest rank, the median over rounds.
    def worst(key, base=None):
        by_round = {}
        for r in mine:
            v = r[key] - (r[base] if base else 0)
            by_round.setdefault(r["rank"], []).append(v)
        return max(statistics.median(v) for v in by_round.values())
    foot, figure = worst("footprint_total"), mine[0]["zero_accounting"]
    buffers = mine[0].get("stated_buffers", 0)
    steps_peak = worst("steps_peak_rss", "rss_baseline")
    print(f"| {world} | {method} | {mine[0]['psi']:,} | {foot / MB:.1f} | {figure / MB:.1f} | {foot / figure:.3f} | "
          f"{buffers / MB:.1f} | {steps_peak / MB:.1f} | {steps_peak / figure:.2f} | "
          f"{steps_peak / (figure + buffers):.2f} | {worst('ru_maxrss', 'rss_baseline') / MB:.1f} |")
PYEOF
