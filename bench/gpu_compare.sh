#!/usr/bin/env bash
# dtrain against PyTorch 2.x on one GPU: the same model, batch, synthetic data, optimizer (SGD, momentum
# 0.9, lr 0.1) and precision, `dtrain train` against bench/peer/gpu_peer.py (autocast, channels_last,
# cudnn.benchmark), alternating A B A B in rounds. Two modes: parallel.strategy=local against the eager
# loop, and data_parallel on one rank over nccl against DistributedDataParallel over nccl. Prints one
# table of medians: samples/s of each, their ratio, and each one's peak GPU memory.
#   bench/gpu_compare.sh BUILD_DIR
# Environment (defaults in brackets):
#   ROUNDS [2]  STEPS [60] steps per run, the first min(10, STEPS/10) untimed on both sides
#   WORKLOADS ["resnet18-b256 resnet50-b128 transformer-b32 resnet18-b32"]  PRECISIONS ["bf16 fp32 fp16"]
#   MODES ["local data_parallel"]  DEVICE [cuda]: cpu is a dry run at tiny sizes (gloo, not nccl)
#   CUDA_GRAPH=1: also dtrain with train.cuda_graph=true (a row "refused" where the binary refuses the key)
#   BUDGET_S [0: none]: no run starts after this many seconds; the table is printed from what ran
#   RUN_TIMEOUT_S [120]  PY [the first of python3, /usr/bin/python3 that imports torch]: a Python with
#   PyTorch (2.x on a GPU)  JSONL: write every run's row to this file
# A run that fails prints its last lines on stderr and its cell says why; the script goes on.
# Rounds are the outer loop and bf16 comes first, so a run cut short by BUDGET_S still has A B for
# every workload in the precision a GPU trains in.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: bench/gpu_compare.sh BUILD_DIR}
DTRAIN=$BUILD/bin/dtrain
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-60}
WORKLOADS=${WORKLOADS:-"resnet18-b256 resnet50-b128 transformer-b32 resnet18-b32"}
PRECISIONS=${PRECISIONS:-"bf16 fp32 fp16"}
MODES=${MODES:-"local data_parallel"}
DEVICE=${DEVICE:-cuda}
BUDGET_S=${BUDGET_S:-0}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-120}
if [ -z "${PY:-}" ]; then
  for PY in python3 /usr/bin/python3 ""; do "$PY" -c 'import torch' 2>/dev/null && break; done
fi
[ -n "$PY" ] && "$PY" -c 'import torch' 2>/dev/null ||
  { echo "bench/gpu_compare.sh: ${PY:-python3 or /usr/bin/python3} cannot import torch; set PY to a Python with PyTorch" >&2; exit 2; }
BACKEND=nccl
[ "$DEVICE" = cpu ] && BACKEND=gloo
if [ "$DEVICE" = cuda ] && ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "bench/gpu_compare.sh: $PY's PyTorch sees no GPU; DEVICE=cpu is a dry run without one" >&2
  exit 2
fi
[ -x "$DTRAIN" ] || { echo "no $DTRAIN; build dtrain first (bench/device/gpu-compare.sh does on a GPU machine)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=${JSONL:-$work/rows.jsonl}  # row by row, so a run stopped from outside keeps what it measured
: >"$rows"
T0=$(date +%s)

# The workload's model, data and batch. The data: `samples` random samples of `shape` held in host
# memory (about 100 MB to 600 MB), cycled through; resnet50's 1,024 make an epoch of 8 steps.
set_workload() {
  stem=cifar dim=64 depth=2 heads=4 ratio=2
  case $1 in
    resnet18-b256) model=resnet18 shape=3,32,32 batch=256 samples=8192 ;;
    resnet18-b32) model=resnet18 shape=3,32,32 batch=32 samples=8192 ;;
    resnet50-b128) model=resnet50 stem=imagenet shape=3,224,224 batch=128 samples=1024 ;;
    # Wide enough that its matrix products fill an H100 (8,192 tokens of width 1,024 a step), small
    # enough for a short run: by count 2.6 TFLOP a step, some 50 ms at an H100's fp32 (not TF32) rate.
    transformer-b32) model=transformer shape=1,256,256 batch=32 samples=2048 dim=1024 depth=4 heads=16 ratio=4 ;;
    *)
      echo "WORKLOADS: unknown workload '$1'; expected resnet18-b256, resnet18-b32, resnet50-b128 or transformer-b32" >&2
      exit 2
      ;;
  esac
  if [ "$DEVICE" = cpu ]; then  # a dry run on a few cores: the same command lines at tiny sizes
    batch=8 samples=32
    [ "$model" = resnet50 ] && shape=3,64,64
    [ "$model" = transformer ] && shape=1,32,32 dim=64 depth=2 heads=4
  fi
  return 0
}

dtrain_command() {  # mode precision: the command line into the array cmd
  local mode=$1 precision=$2
  cmd=("$DTRAIN" train)
  [ "$mode" = data_parallel ] && cmd+=(--nproc 1 parallel.strategy=data_parallel "parallel.backend=$BACKEND")
  [ "$mode" = local ] && cmd+=(parallel.strategy=local)
  # No normalisation: the peer's data have none. Two loader threads make batches ahead, as a GPU job
  # is run (the peer's batches are ready in pinned memory). Evaluation is one batch, after the timing.
  cmd+=(data.dataset=synthetic "data.synthetic_shape=[$shape]" "data.synthetic_size=$samples"
    data.synthetic_classes=10 data.normalize=false data.loader_threads=2 "data.batch_size=$batch"
    "data.eval_batch_size=$batch" "data.test_subset_size=$batch" "model.name=$model"
    optim.name=sgd optim.lr=0.1 optim.momentum=0.9 "train.max_steps=$STEPS" train.epochs=1000000
    train.eval_every_epochs=0 train.checkpoint_every_epochs=0 "train.device=$DEVICE" "train.precision=$precision")
  if [ "$model" = transformer ]; then
    cmd+=("model.dim=$dim" "model.depth=$depth" "model.heads=$heads" "model.mlp_ratio=$ratio")
  else
    cmd+=("model.stem=$stem")
  fi
}

peer_command() {  # mode precision
  local mode=eager
  [ "$1" = data_parallel ] && mode=ddp
  cmd=("$PY" bench/peer/gpu_peer.py --device "$DEVICE" --mode "$mode" --precision "$2" --model "$model"
    --stem "$stem" --shape "$shape" --classes 10 --batch "$batch" --samples "$samples" --steps "$STEPS"
    --dim "$dim" --depth "$depth" --heads "$heads" --mlp-ratio "$ratio")
}

graph_refused=""  # the reason, once this binary has refused train.cuda_graph: not asked again
run_n=0
# impl workload mode precision: runs one side, appends its row to $rows.
run_one() {
  local impl=$1 name=$2 mode=$3 precision=$4 status=ok rc=0 start
  run_n=$((run_n + 1))
  local dir=$work/run-$run_n
  if [ "$BUDGET_S" -gt 0 ] && [ $(($(date +%s) - T0)) -ge "$BUDGET_S" ]; then
    status="not run"
  elif [ "$impl" = dtrain-graph ] && [ -n "$graph_refused" ]; then
    status=refused
  else
    if [ "$impl" = pytorch ]; then peer_command "$mode" "$precision"; else dtrain_command "$mode" "$precision"; fi
    [ "$impl" = dtrain-graph ] && cmd+=(train.cuda_graph=true)
    [ "$impl" = pytorch ] || cmd+=(--run-dir "$dir")
    echo "[$(($(date +%s) - T0))s] $impl $name $precision $mode" >&2
    start=$(date +%s.%N)
    timeout -k 10 "$RUN_TIMEOUT_S" "${cmd[@]}" >"$dir.out" 2>"$dir.err" || rc=$?
    if [ "$rc" != 0 ]; then
      status="failed (rc $rc)"
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        status=timeout
      elif [ "$rc" = 2 ] && [ "$impl" != pytorch ]; then
        status=refused  # dtrain exits 2 when it refuses a configuration, and says why
      fi
      echo "  $impl $name $precision $mode: $status; its last lines:" >&2
      tail -n 8 "$dir.err" | sed 's/^/    /' >&2
      if [ "$impl" = dtrain-graph ] && [ "$status" = refused ]; then graph_refused=$(tail -n 1 "$dir.err"); fi
    fi
  fi
  "$PY" - "$impl" "$name" "$mode" "$precision" "$status" "$dir" "${start:-0}" >>"$rows" <<'PYEOF'
import json, os, sys, time
impl, name, mode, precision, status, run, start = sys.argv[1:]
row = {"impl": impl, "workload": name, "mode": mode, "precision": precision, "status": status,
       "samples_per_second": None, "peak_bytes": None,
       "wall_s": round(time.time() - float(start), 1) if float(start) else None}
try:
    if status == "ok" and impl == "pytorch":
        r = json.loads(open(run + ".out").read().strip().splitlines()[-1])
        row.update(samples_per_second=r["samples_per_second"], peak_bytes=r["max_memory_allocated_bytes"],
                   torch=r["torch"], parameters=r["parameters"])
    elif status == "ok":
        r = json.load(open(os.path.join(run, "results.json")))
        row.update(samples_per_second=r["samples_per_second"], peak_bytes=r.get("gpu_memory_peak_bytes"),
                   parameters=r["parameters"])
except (OSError, ValueError, KeyError, IndexError) as e:
    row["status"] = f"no result ({type(e).__name__})"
print(json.dumps(row))
PYEOF
}

for round in $(seq "$ROUNDS"); do
  for precision in $PRECISIONS; do
    for name in $WORKLOADS; do
      set_workload "$name"
      for mode in $MODES; do
        run_one dtrain "$name" "$mode" "$precision"
        run_one pytorch "$name" "$mode" "$precision"
        if [ "${CUDA_GRAPH:-0}" = 1 ]; then run_one dtrain-graph "$name" "$mode" "$precision"; fi
      done
    done
  done
done

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
"$PY" - "$rows" "$DEVICE" "$BACKEND" "$STEPS" "$ROUNDS" "${gpu:-no GPU}" "$WORKLOADS" "$PRECISIONS" "$MODES" <<'PYEOF'
import json, statistics, sys
path, device, backend, steps, rounds, gpu, workloads, precisions, modes = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
torch = sorted({r["torch"] for r in rows if r.get("torch")})
print(f"dtrain against PyTorch {', '.join(torch) or '?'} on {device} ({gpu}): {steps} steps a run, "
      f"{rounds} round{'s' if rounds != '1' else ''} of dtrain then PyTorch, medians")
mode_names = {"local": "local vs eager", "data_parallel": f"data_parallel vs DDP, {backend}, 1 rank"}
print("| workload | precision | mode | dtrain samples/s | PyTorch samples/s | dtrain / PyTorch "
      "| dtrain peak GPU MiB | PyTorch peak GPU MiB | runs dtrain, PyTorch |")
print("|---|---|---|---:|---:|---:|---:|---:|---|")

def cell(impl, w, p, m):
    """(median samples/s or None, median peak bytes or None, what to print when there is no rate, runs)"""
    mine = [r for r in rows if (r["impl"], r["workload"], r["precision"], r["mode"]) == (impl, w, p, m)]
    ok = [r for r in mine if r["status"] == "ok"]
    if not ok:
        why = sorted({r["status"] for r in mine}) or ["not run"]
        return None, None, "/".join(why), f"0/{len(mine)}"
    peaks = [r["peak_bytes"] for r in ok if r["peak_bytes"] is not None]
    return (statistics.median(r["samples_per_second"] for r in ok), statistics.median(peaks) if peaks else None,
            "", f"{len(ok)}/{len(mine)}")

def mib(b):
    return f"{b / 2**20:.0f}" if b is not None else "n/a"

for p in precisions.split():
    for w in workloads.split():
        for m in modes.split():
            peer = cell("pytorch", w, p, m)
            for impl, label in (("dtrain", mode_names[m]), ("dtrain-graph", mode_names[m] + ", cuda_graph")):
                d = cell(impl, w, p, m)
                if impl == "dtrain-graph" and d[3] == "0/0":
                    continue
                rate = lambda c: f"{c[0]:.0f}" if c[0] is not None else c[2]
                ratio = f"{d[0] / peer[0]:.2f}" if d[0] and peer[0] else ""
                print(f"| {w} | {p} | {label} | {rate(d)} | {rate(peer)} | {ratio} | {mib(d[1]) if d[0] else ''} "
                      f"| {mib(peer[1]) if peer[0] else ''} | {d[3]}, {peer[3]} |")
# The same model on both sides: the parameter counts must agree.
for w in workloads.split():
    counts = {(r["impl"], r["parameters"]) for r in rows if r["workload"] == w and r.get("parameters")}
    if len({n for _, n in counts}) > 1:
        print(f"warning: {w}: the parameter counts differ: {sorted(counts)}")
PYEOF
