#!/usr/bin/env bash
# Time to accuracy on slow links: Fashion-MNIST LeNet-5 trained by N workers, one per host of
# bench/netns.sh (network namespaces, every link limited by tc tbf to the rate), by
#   allreduce  data_parallel: a ring all-reduce of the gradients every step (gloo)
#   one_peer   dsgd on the one-peer exponential graph: one model to one peer per step
#   push_sum   push-sum on the one-peer exponential graph
#   async      asynchronous dsgd on the directed ring (one model to one peer per step, as one_peer;
#              the one-peer graph changes every round, which asynchronous gossip refuses), staleness 8
# with the same data (each worker or graph node 1/N of the training set, partition random), seed,
# batch per worker, optimizer and epochs. Every run evaluates the node average (data_parallel: the
# model) on the same 1000 test images every EVAL steps, so evaluation is in every run's clock.
# Prints one JSON line per run on stderr and a Markdown table on stdout: seconds from the first
# evaluation (step 0) to the first at or above TARGET top-1, the final top-1, the bytes per worker
# per step the strategy counts (one_peer: a model; all-reduce: 2 (N-1) / N of a gradient) and what
# host 0's link carried per step (tx bytes of its eth0: every message, evaluation's too, with TCP's
# headers). Needs root (bench/netns.sh) and the dataset-fashion-mnist package.
#   bench/decentralized_time_to_accuracy.sh [BUILD_DIR=build] [RATES="1gbit 100mbit"] [NODES=8]
#                                           [EPOCHS=1] [TARGET=0.75] [METHODS="allreduce one_peer push_sum async"]
#   EVAL=40 (steps between evaluations), MAX_STEPS=0 (else a cap, to try the script)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RATES=${2:-"1gbit 100mbit"}
NODES=${3:-8}
EPOCHS=${4:-1}
TARGET=${5:-0.75}
METHODS=${6:-"allreduce one_peer push_sum async"}
EVAL=${EVAL:-40}
MAX_STEPS=${MAX_STEPS:-0}  # 0: the epochs' steps; a smaller number for a quick check of the script
DTRAIN=$(readlink -f "$BUILD/bin/dtrain")
PY=/usr/bin/python3
[ -x "$DTRAIN" ] || { echo "decentralized_time_to_accuracy.sh: no $BUILD/bin/dtrain; build it first" >&2; exit 1; }
compgen -G "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte*" >/dev/null ||
  { echo "decentralized_time_to_accuracy.sh: Fashion-MNIST is not installed; install dataset-fashion-mnist" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl

cat >"$work/tta.yaml" <<EOF
name: time_to_accuracy
data: {dataset: fashion-mnist, partition: random, batch_size: 32, eval_batch_size: 1000, test_subset_size: 1000}
model: {name: lenet5}
optim: {name: sgd, lr: 0.05, momentum: 0.9, loss: cross_entropy}
train: {epochs: $EPOCHS, eval_every_steps: $EVAL, eval_every_epochs: 0, eval_at_start: true,
        log_every_steps: $EVAL, checkpoint_every_epochs: 0, seed: 0$([ "$MAX_STEPS" = 0 ] || echo ", max_steps: $MAX_STEPS")}
parallel: {strategy: data_parallel, backend: gloo}
EOF

method_args() {  # method
  local gossip="parallel.strategy=decentralized parallel.graph.nodes=$NODES"
  case $1 in
    allreduce) echo "" ;;
    one_peer) echo "$gossip parallel.graph.type=one_peer_exponential parallel.decentralized.algorithm=dsgd" ;;
    push_sum) echo "$gossip parallel.graph.type=one_peer_exponential parallel.decentralized.algorithm=push_sum" ;;
    async) echo "$gossip parallel.graph.type=directed_cycle parallel.decentralized.algorithm=dsgd \
parallel.decentralized.asynchronous=true parallel.decentralized.staleness=8" ;;
    *) echo "decentralized_time_to_accuracy.sh: no method $1" >&2; exit 2 ;;
  esac
}

# What each host runs: its one rank of the job, then (host 0) what its link sent and received.
cat >"$work/host_job.sh" <<'EOF'
#!/bin/sh
# host_job.sh DTRAIN RUN_DIR NODES ARGS...
set -e
dtrain=$1 run_dir=$2 nodes=$3
shift 3
before=$(cat /sys/class/net/eth0/statistics/tx_bytes)
"$dtrain" launch --nnodes "$nodes" --node-rank "$HOST_INDEX" --nproc-per-node 1 --threads 1 \
  --master-addr "$MASTER_ADDR" --master-port 29500 --timeout 300 --log-dir "$run_dir.logs-h$HOST_INDEX" -- \
  "$dtrain" train "$@" --run-dir "$run_dir"
if [ "$HOST_INDEX" = 0 ]; then
  echo "link-tx-bytes $(( $(cat /sys/class/net/eth0/statistics/tx_bytes) - before ))"
fi
EOF
chmod +x "$work/host_job.sh"

run() {  # rate method
  local rate=$1 method=$2 out=$work/$1-$2 start end
  mkdir -p "$out"
  start=$(date +%s.%N)
  # shellcheck disable=SC2046
  bench/netns.sh run "$NODES" --rate "$rate" --timeout 1800 --log-dir "$out" -- \
    "$work/host_job.sh" "$DTRAIN" "$out/run" "$NODES" "$work/tta.yaml" $(method_args "$method") \
    2>"$out/err" || { tail -n 20 "$out/err" "$out"/h0.log; exit 1; }
  end=$(date +%s.%N)
  $PY - "$rate" "$method" "$out" "$TARGET" "$NODES" "$start" "$end" <<'PYEOF' | tee -a "$results" >&2
import json, re, sys
rate, method, out, target, nodes, start, end = sys.argv[1:]
target, nodes = float(target), int(nodes)
evals = [json.loads(l) for l in open(f"{out}/run/metrics.jsonl") if '"val/top1"' in l]
evals = [e for e in evals if "val/top1" in e]
t0 = evals[0]["wall_time"]
reached = next((e for e in evals if e["val/top1"] >= target), None)
result = json.load(open(f"{out}/run/results.json"))
steps = result["steps"]
tx = int(re.search(r"link-tx-bytes (\d+)", open(f"{out}/h0.log").read()).group(1))
last = evals[-1]
model_bytes = 4 * result["parameters"]
counted = (last["strategy/node_bytes_sent"] / steps if "strategy/node_bytes_sent" in last
           else 2 * (nodes - 1) / nodes * model_bytes)
print(json.dumps({
    "rate": rate, "method": method, "nodes": nodes, "steps": steps,
    "seconds_to_target": round(reached["wall_time"] - t0, 1) if reached else None,
    "step_at_target": reached["step"] if reached else None,
    "train_seconds": round(last["wall_time"] - t0, 1), "job_seconds": round(float(end) - float(start), 1),
    "final_top1": result["final"]["top1"], "model_bytes": model_bytes,
    "counted_bytes_per_step": round(counted), "link_tx_bytes_per_step": round(tx / steps),
    "consensus_error": last.get("strategy/consensus_error"),
    "stale_skipped_per_round": last.get("strategy/stale_neighbours_skipped_per_round")}))
PYEOF
}

for rate in $RATES; do
  for method in $METHODS; do
    echo "rate $rate, $method" >&2
    run "$rate" "$method"
  done
done

$PY - "$results" "$TARGET" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"| rate | method | s to top-1 {sys.argv[2]} (step) | s for all steps | final top-1 | "
      "bytes/worker/step counted | host 0 link tx/step | consensus error |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    reach = f"{r['seconds_to_target']} ({r['step_at_target']})" if r["seconds_to_target"] is not None else "not reached"
    ce = f"{r['consensus_error']:.3f}" if r["consensus_error"] is not None else "-"
    print(f"| {r['rate']} | {r['method']} | {reach} | {r['train_seconds']} | {r['final_top1']:.3f} | "
          f"{r['counted_bytes_per_step']:,} | {r['link_tx_bytes_per_step']:,} | {ce} |")
PYEOF
