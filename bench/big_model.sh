#!/usr/bin/env bash
# A transformer whose state for 8 data-parallel ranks is more than this machine has: about 400M
# parameters (model.dim 1280, 20 blocks, MLP 4x), 6.4 GB a rank in fp32 with Adam, on 8 workers of one
# machine. data_parallel is refused before its first step, from the footprint the run plans; the
# 2 x 2 x 2 mesh (pp 2 x dp_shard 2 x tp 2, each rank building only its stage's shards:
# model.deferred_init) trains, and each rank's peak resident memory is printed beside the peak the
# run planned. Character-level text (docs/*.md), 32 characters a sample, full activation
# recomputation, one thread a worker.
#   bench/big_model.sh [steps [KEY=VALUE...]]    (default 3 steps, of which 1 warm-up)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-3}
shift $(( $# > 0 ? 1 : 0 ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat docs/*.md >"$work/corpus.txt"
sets=()
for kv in data.dataset=text "data.text_path=$work/corpus.txt" data.seq_len=32 data.test_subset_size=8 \
          model.task=lm model.dim=1280 model.depth=20 model.heads=16 model.mlp_ratio=4 model.dropout=0 \
          model.deferred_init=true train.activation_checkpointing=full \
          optim.name=adam optim.lr=0.0001 optim.momentum=null optim.nesterov=null \
          parallel.backend=gloo train.threads=1 "$@"; do
  sets+=(--set "$kv")
done
point() {  # strategy, then --set KEY=VALUE pairs of its own
  local strategy=$1; shift
  /usr/bin/time -f "%e s wall, host peak %M KB in the launcher" \
    build/bin/dtrain bench throughput --models transformer --batches 2 --workers 8 --steps "$steps" --warmup 1 \
      --strategies "$strategy" "${sets[@]}" "$@" 2>"$work/err" | tail -1
  tail -1 "$work/err" >&2
}
cat >"$work/summary.py" <<'PY'
import json, sys
r = json.loads(sys.stdin.read())
print(f"{r['strategy']}: {r['status']} {r.get('reason', '')}")
if r["status"] == "ok":
    print(f"parameters {r['parameters']:,}, {r['step_ms'] / 1e3:.1f} s a step")
    print("| rank | parameters MB | gradients MB | optimizer MB | planned peak MB | measured peak MB | measured / planned |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for k in r["ranks"]:
        p, m = k["planned_peak_bytes"], k["peak_rss_bytes"]
        print(f"| {k['rank']} | {k['parameters_bytes'] / 1e6:.0f} | {k['gradients_bytes'] / 1e6:.0f} | "
              f"{k['optimizer_bytes'] / 1e6:.0f} | {p / 1e6:.0f} | {m / 1e6:.0f} | {m / p:.3f} |")
PY
summary() { python3 "$work/summary.py"; }
grep MemAvailable /proc/meminfo
point data_parallel | summary
point pipeline --set parallel.mesh.pp=2 --set parallel.mesh.dp_shard=2 --set parallel.mesh.tp=2 \
  --set parallel.pipeline.micro_batches=2 | summary
