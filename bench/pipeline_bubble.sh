#!/usr/bin/env bash
# Pipeline parallel's bubble and memory: gpipe at S = 2, 4 stages and M = 1, 2, 4, 8
# micro-batches on an mlp, each stage one worker with one thread, prints the measured idle fraction
# of every stage (time blocked receiving activations or gradients over step time, steps after the
# first; pipeline/idle_fraction/stage<s>) against GPipe's (S-1)/(M+S-1); then gpipe against 1f1b
# at the largest S and M: the most micro-batches of activations each stage held at once
# (pipeline/peak_micro_batches/stage<s>; 1f1b: at most S - s, gpipe: M). Each gpipe row also
# prints pipeline/schedule_idle_fraction (1 - compute time over the schedule's time, the formula's
# own quantity; Note [Measuring the bubble] in PipelineStrategy.cpp), and "for these stages": GPipe's
# idle fraction for the stages' compute as measured, 1 - M B_s / (sum_s B_s + (M-1) max_s B_s) per stage
# with B_s its compute time, which separates the schedule's own cost from stages that compute
# unequally (a slower core, a heavier cut). It assumes each stage's forward and backward in the same
# proportion and free transfers; the target is against (S-1)/(M+S-1) itself. "replayed" is
# pipeline/replay_idle_fraction: the schedule replayed with every pass as this run measured it and
# free transfers (Note [Replaying the schedule]), so unequal and uneven passes are in it and the
# transfers are not; "schedule/replay" is the measured schedule time over the replayed one, what
# the transfers and the waiting for them added; "busiest stage" is pipeline/compute_imbalance, the
# stage that computed the most over the stages' mean (1 for the equal stages the formula assumes).
# The pipeline's batch is BATCH samples whatever S (data.batch_size = BATCH / S per rank).
#   bench/pipeline_bubble.sh [BUILD_DIR=build] [STEPS=40] [BATCH=256] [HIDDEN=[1024,1024,1024,1024,1024,1024]] [STAGES="2 4"] [EXTRA="key=value ..."]
# The formula assumes every stage's forward and every stage's backward take equal time (not only
# their sums): a first layer computes no input gradient, so give it few input features to keep the
# passes equal, as this run does:
#   bench/pipeline_bubble.sh build 12 1024 "[2048,2048,2048,2048,2048,2048,2048]" 2 "data.synthetic_shape=[1,8,8] parallel.backend=mpi"
# Check it runs on tiny sizes: bench/pipeline_bubble.sh build 3 16 '[8,8,8,8]'
# BIND chooses the cores the stages run on, rank i on the i-th listed (the formula needs stages of
# equal speed, and a virtual machine's cores can differ by 20%):
#   unset        the launcher places the ranks (Open MPI binds rank i to core i; gloo's are not bound);
#   BIND="2 7"   these cores, for every S in STAGES (list at least the largest S);
#   BIND=auto    for each S, the S cores that ran the core check's product closest in speed, timed
#                alone one after another first (a choice only where there are more cores than stages).
# The activations' rows (S = 4, M = 8) count micro-batches, not time, and run unbound.
# With BIND, gloo's ranks are started here under taskset with torchrun's environment (RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and mpi's through an Open MPI rankfile.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-40}
BATCH=${3:-256}
HIDDEN=${4:-[1024,1024,1024,1024,1024,1024]}
STAGES=${5:-"2 4"}
EXTRA=${6:-}  # more overrides for every run, e.g. parallel.pipeline.balance=time
PY=${PY:-/usr/bin/python3}  # one with torch (a GPU machine: its venv's python3)
DTRAIN="$BUILD/src/dtrain/cli/dtrain"
[ -x "$DTRAIN" ] || DTRAIN="$BUILD/bin/dtrain"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

BIND=${BIND:-}
backend=gloo
for word in $EXTRA; do
  case $word in parallel.backend=*) backend=${word#parallel.backend=} ;; esac
done
if [ -n "$BIND" ] && [ "$backend" != gloo ] && [ "$backend" != mpi ]; then
  echo "pipeline_bubble: BIND works with parallel.backend gloo or mpi, not $backend" >&2
  exit 2
fi
declare -A bound  # S -> the cores its ranks run on, rank order
# One single-thread 128x2048 by 2048x2048 product, timed for argv[1] seconds: its median in ms.
product="
import sys, time, torch
torch.set_num_threads(1)
a, w = torch.randn(128, 2048), torch.randn(2048, 2048)
ts, end = [], time.time() + float(sys.argv[1])
while time.time() < end:
    t = time.perf_counter(); a @ w; ts.append(time.perf_counter() - t)
print(sorted(ts)[len(ts) // 2] * 1e3)"

# run SCHEDULE S M: prints the run's results.json line (the last JSON line dtrain prints).
run() {
  local schedule=$1 stages=$2 micro=$3
  rm -rf "$work/runs"
  local args=("out_dir=$work/runs" "nproc=$stages" parallel.strategy=pipeline parallel.backend=gloo
    "parallel.pipeline.schedule=$schedule" "parallel.pipeline.stages=$stages"
    "parallel.pipeline.micro_batches=$micro" data.dataset=synthetic "data.synthetic_shape=[1,28,28]"
    data.synthetic_size=100000 data.test_subset_size=64 "data.batch_size=$((BATCH / stages))"
    model.name=mlp "model.hidden=$HIDDEN" optim.name=sgd optim.lr=0.01 "train.max_steps=$STEPS"
    train.epochs=1000 train.eval_every_epochs=0 train.checkpoint_every_epochs=0 train.threads=1)
  # shellcheck disable=SC2206  # EXTRA: one override per word
  args+=($EXTRA)
  if [ -z "$BIND" ]; then
    "$DTRAIN" train "${args[@]}" 2>"$work/err" | grep '^{' | tail -n 1 || { tail -n 20 "$work/err" >&2; exit 1; }
    return
  fi
  local list r
  read -r -a list <<< "${bound[$stages]}"
  if [ "$backend" = mpi ]; then
    : >"$work/rankfile"
    for ((r = 0; r < stages; r++)); do echo "rank $r=$(hostname) slot=${list[$r]}" >>"$work/rankfile"; done
    OMPI_MCA_rmaps_rank_file_path="$work/rankfile" "$DTRAIN" train "${args[@]}" 2>"$work/err" | grep '^{' |
      tail -n 1 || { tail -n 20 "$work/err" >&2; exit 1; }
    return
  fi
  local port pids=() failed=0
  port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for ((r = stages - 1; r >= 0; r--)); do
    RANK=$r WORLD_SIZE=$stages LOCAL_RANK=$r LOCAL_WORLD_SIZE=$stages MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      taskset -c "${list[$r]}" "$DTRAIN" train "${args[@]}" >"$work/out$r" 2>"$work/err$r" &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || failed=1; done
  if [ "$failed" = 1 ]; then
    tail -n 20 "$work"/err* >&2
    exit 1
  fi
  grep '^{' "$work/out0" | tail -n 1
}

# cores N: one single-thread 128x2048 by 2048x2048 product timed on each core N ranks run on
# (bound[N]; without BIND cores 0..N-1: Open MPI binds rank i to core i when ranks <= cores), first
# alone, one core after another, then on all N at once: the medians, slowest over fastest, and at
# once over alone. GPipe's formula assumes equal stages whose compute time does not depend on what
# the others do. Cores that run the product at different speeds make unequal stages whatever the
# cut; cores that slow each other down (virtual CPUs on one physical core's two hardware threads)
# make a stage's compute time depend on whether the other stages compute at the same moment.
cores() {
  local n=$1 c
  if [ "$n" -gt "$(nproc)" ] || ! command -v taskset > /dev/null; then
    echo "core check skipped ($n stages, $(nproc) cores)"
    return
  fi
  local list
  read -r -a list <<< "${bound[$n]}"
  for ((c = 0; c < n; c++)); do taskset -c "${list[$c]}" $PY -c "$product" 1.5 > "$work/alone$c"; done
  local pids=()
  for ((c = 0; c < n; c++)); do
    taskset -c "${list[$c]}" $PY -c "$product" 3 > "$work/together$c" &
    pids+=($!)
  done
  for c in "${pids[@]}"; do wait "$c"; done
  $PY -c "
import sys
n = $n
alone = [float(open(f'$work/alone{c}').read()) for c in range(n)]
together = [float(open(f'$work/together{c}').read()) for c in range(n)]
ratio = sum(together) / sum(alone)
print('core check (cores ${bound[$n]}): one-thread product, ms per core alone ' + ' '.join(f'{x:.2f}' for x in alone) +
      ', all at once ' + ' '.join(f'{x:.2f}' for x in together) +
      f', slowest/fastest {max(together) / min(together):.3f}, at once/alone {ratio:.2f}' +
      ('  (the cores slow each other down: the formula does not hold here)' if ratio > 1.2 else ''))"
  rm -f "$work"/alone* "$work"/together*
}

# bound[S] for every S. (The activations' rows below count micro-batches, not time: not bound.)
speeds=
for stages in $STAGES; do
  if [ -z "$BIND" ]; then
    bound[$stages]=$(seq -s ' ' 0 $((stages - 1)))
  elif [ "$BIND" = auto ]; then
    if [ "$stages" -gt "$(nproc)" ] || ! command -v taskset > /dev/null; then
      echo "pipeline_bubble: BIND=auto needs taskset and a core per stage ($stages stages, $(nproc) cores)" >&2
      exit 2
    fi
    if [ -z "$speeds" ]; then
      for ((c = 0; c < $(nproc); c++)); do speeds+="$c $(taskset -c "$c" "$PY" -c "$product" 1)"$'\n'; done
      echo "cores alone, ms: $(echo "$speeds" | awk 'NF { printf "%s:%.2f ", $1, $2 }')"
    fi
    # The window of S cores, in order of speed, whose slowest over fastest is least.
    bound[$stages]=$(echo "$speeds" | $PY -c "
import sys
cores = sorted((float(t), int(c)) for c, t in (l.split() for l in sys.stdin if l.strip()))
S = $stages
best = min(range(len(cores) - S + 1), key=lambda i: cores[i + S - 1][0] / cores[i][0])
print(' '.join(str(c) for _, c in cores[best:best + S]))")
  else
    read -r -a list <<< "$BIND"
    if [ "${#list[@]}" -lt "$stages" ]; then
      echo "pipeline_bubble: BIND=\"$BIND\" lists ${#list[@]} cores; $stages stages need as many" >&2
      exit 2
    fi
    bound[$stages]="${list[*]:0:$stages}"
  fi
done

echo "gpipe: measured idle fraction per stage against (S-1)/(M+S-1)"
for stages in $STAGES; do
  cores "$stages"
  for micro in 1 2 4 8; do
    run gpipe "$stages" "$micro" | $PY -c "
import json, sys
r = json.load(sys.stdin)
m = r['strategy_metrics']
S, M = $stages, $micro
idle = [m[f'pipeline/idle_fraction/stage{s}'] for s in range(S)]
sched = [m[f'pipeline/schedule_idle_fraction/stage{s}'] for s in range(S)]
expected = (S - 1) / (M + S - 1)
mean = sum(idle) / S
smean = sum(sched) / S
# GPipe's idle for these stages' own compute (1 - schedule idle is each stage's compute over the
# same schedule time): 1 - M B_s / (sum B + (M-1) max B), which is (S-1)/(M+S-1) for equal B.
busy = [1 - x for x in sched]
span = sum(busy) + (M - 1) * max(busy)
unequal = sum(1 - M * b / span for b in busy) / S if span > 0 else 0.0
replay = [m[f'pipeline/replay_idle_fraction/stage{s}'] for s in range(S)]
rmean = sum(replay) / S
print(f'S={S} M={M}  expected {expected:.3f}  receive-wait ' + ' '.join(f'{x:.3f}' for x in idle) +
      f'  mean {mean:.3f} ({mean / expected:.2f}x)  schedule ' + ' '.join(f'{x:.3f}' for x in sched) +
      f'  mean {smean:.3f} ({smean / expected:.2f}x)  for these stages {unequal:.3f} ({unequal / expected:.2f}x;' +
      f' measured {smean / unequal:.2f}x of it)' +
      f'  replayed {rmean:.3f} ({rmean / expected:.2f}x), schedule/replay {m[\"pipeline/schedule_over_replay\"]:.3f}' +
      f'  busiest stage {m[\"pipeline/compute_imbalance\"]:.3f}x the mean' +
      f'  {r[\"samples_per_second\"]:.0f} samples/s')
"
  done
  cores "$stages"
done

echo "activations held per stage (micro-batches), S=4 M=8"
for schedule in gpipe 1f1b; do
  BIND='' run "$schedule" 4 8 | $PY -c "
import json, sys
m = json.load(sys.stdin)['strategy_metrics']
print('$schedule', ' '.join(str(int(m[f'pipeline/peak_micro_batches/stage{s}'])) for s in range(4)))
"
done
