#!/usr/bin/env bash
# zero stages 1, 2 and 3 against data_parallel on resnet18 (CIFAR-10's shape: synthetic 3x32x32
# images, 10 classes), 2 workers on this host over gloo, batch 64 per worker, Adam, one thread per
# worker, the same steps; and against their PyTorch peers (bench/peer/zero_peer.py, python3-torch
# 1.13): DDP with Adam for data_parallel, DDP with ZeroRedundancyOptimizer(Adam) for zero stage 1
# (1.13 has no usable FSDP, so stages 2 and 3 have no peer). Runs alternate A B A B within each
# round; the table gives median samples/s (after the warm-up steps), each round's ratio to the same
# round's data_parallel and to the same round's PyTorch peer, and the step's time split. The
# targets: stage 2 >= 0.95x, stage 3 >= 0.8x data_parallel.
#   bench/zero_throughput.sh [BUILD_DIR=build] [ROUNDS=3] [STEPS=100] [MODEL=resnet18] [BATCH=64]
#   PEER=0 leaves the PyTorch runs out (they need MODEL=resnet18).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
STEPS=${3:-100}
MODEL=${4:-resnet18}
BATCH=${5:-64}
DTRAIN=$(readlink -f "$BUILD/bin/dtrain")
PY=/usr/bin/python3
[ -x "$DTRAIN" ] || { echo "zero_throughput.sh: no $BUILD/bin/dtrain; build it first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl
cat >"$work/base.yaml" <<YAML
name: zero-throughput
nproc: 2
data: {dataset: synthetic, synthetic_shape: [3, 32, 32], synthetic_classes: 10, synthetic_size: 8192,
       batch_size: $BATCH, test_subset_size: 0}
model: {name: $MODEL}
optim: {name: adam, lr: 0.001}
parallel: {strategy: data_parallel, backend: gloo}
train: {epochs: 100, max_steps: $STEPS, eval_every_epochs: 1000, checkpoint_every_epochs: 0, threads: 1,
        log_every_steps: 1000000, seed: 1}
YAML

method_args() {  # method
  case $1 in
    data_parallel) echo "parallel.strategy=data_parallel" ;;
    zero*) echo "parallel.strategy=zero parallel.zero.stage=${1#zero}" ;;
  esac
}

peer() {  # round method
  local out=$work/$1-$2
  mkdir -p "$out"
  $PY bench/peer/zero_peer.py --impl "${2#pytorch-}" --workers 2 --threads 1 --batch "$BATCH" --steps "$STEPS" \
    --lr 0.001 --seed 1 >"$out/stdout" 2>"$out/err" ||
    { echo "zero_throughput.sh: $2 failed:" >&2; tail -n 20 "$out/err" >&2; exit 1; }
  tail -n 1 "$out/stdout" | $PY -c "
import json, sys
r = json.load(sys.stdin)
print(json.dumps({'round': $1, 'method': '$2', 'steps': r['steps'], 'samples_per_second': r['samples_per_second'],
                  'peak_rss_mib': r['peak_rss_mib']}))" | tee -a "$results" >&2
}

run() {  # round method
  case $2 in pytorch-*) peer "$@"; return ;; esac
  local out=$work/$1-$2
  mkdir -p "$out"
  # shellcheck disable=SC2046
  "$DTRAIN" train "$work/base.yaml" "out_dir=$out/runs" $(method_args "$2") >"$out/stdout" 2>"$out/err" ||
    { echo "zero_throughput.sh: $2 failed:" >&2; tail -n 20 "$out/err" >&2; exit 1; }
  grep -h '^{' "$out/stdout" | tail -n 1 | $PY -c "
import json, sys
r = json.load(sys.stdin)
row = {'round': $1, 'method': '$2', 'steps': r['steps'], 'samples_per_second': r['samples_per_second'],
       'bytes_per_step': r.get('bytes_per_step', 0)}
for k, v in (r.get('step_time') or {}).items():
    row[k] = v
print(json.dumps(row))" | tee -a "$results" >&2
}

methods="data_parallel zero1 zero2 zero3"
if [ "${PEER:-1}" = 1 ]; then
  [ "$MODEL" = resnet18 ] || { echo "zero_throughput.sh: the PyTorch peer runs resnet18 only; set PEER=0" >&2; exit 1; }
  methods="$methods pytorch-ddp pytorch-zero1"
fi
for round in $(seq "$ROUNDS"); do
  for method in $methods; do
    echo "round $round/$ROUNDS: $MODEL $method" >&2
    run "$round" "$method"
  done
done

$PY - "$results" "$MODEL" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def of(method, key):
    return [r[key] for r in rows if r["method"] == method and key in r]
def per_round(method):
    return {r["round"]: r["samples_per_second"] for r in rows if r["method"] == method}
base = per_round("data_parallel")
peers = {"data_parallel": "pytorch-ddp", "zero1": "pytorch-zero1"}
names = {"data_parallel": "data_parallel", "pytorch-ddp": "PyTorch DDP + Adam",
         "pytorch-zero1": "PyTorch DDP + ZeroRedundancyOptimizer(Adam)"}
print("| model | strategy | samples/s (median) | vs data_parallel (median of rounds) | per round "
      "| vs its PyTorch peer (median of rounds) | per round | bytes/step | forward / backward / comm / update ms |")
print("|---|---|---|---|---|---|---|---|---|")
for method in dict.fromkeys(r["method"] for r in rows):
    sps = statistics.median(of(method, "samples_per_second"))
    ratios = [v / base[k] for k, v in per_round(method).items()]
    peer = per_round(peers[method]) if method in peers else {}
    vs_peer = [v / peer[k] for k, v in per_round(method).items() if k in peer]
    split = " / ".join(f"{1e3 * statistics.median(of(method, k)):.1f}" if of(method, k) else "-"
                       for k in ("forward_s", "backward_s", "comm_s", "update_s"))
    name = names.get(method, f"zero stage {method[4:]}")
    peer_cells = (f"{statistics.median(vs_peer):.2f}x | {', '.join(f'{x:.2f}' for x in vs_peer)}"
                  if vs_peer else "- | -")
    wire = f"{statistics.median(of(method, 'bytes_per_step')):,.0f}" if of(method, "bytes_per_step") else "-"
    print(f"| {sys.argv[2]} | {name} | {sps:.1f} | {statistics.median(ratios):.2f}x | "
          f"{', '.join(f'{x:.2f}' for x in ratios)} | {peer_cells} | {wire} | {split} |")
PYEOF
