#!/usr/bin/env bash
# docs/composing-parallelisms.md's table: the same 8 workers arranged by parallel.mesh (data_parallel, zero 3,
# HSDP both ways, a replicated pipeline, HSDP with full activation recomputation, and with tensor parallelism
# 2-D, HSDP x tp and 3-D, with replicated and with sharded stages), one small transformer on
# synthetic data. Prints "mesh | bytes per step | parameters gradients optimizer-state bytes peak-RSS MB" per row:
# the bytes from a 5-step `dtrain train` (results.json's bytes_per_step), the state from `dtrain bench
# throughput` (rank 0).
#   bench/mesh_table.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(data.dataset=synthetic 'data.synthetic_shape=[1,32,32]' model.name=transformer model.dim=64 model.depth=4 model.heads=4 optim.name=adam optim.momentum=null optim.nesterov=null)
row() {
  local name=$1; shift
  local bytes mem
  bytes=$(build/bin/dtrain train configs/quickstart.yaml --nproc 8 "${model[@]}" data.batch_size=8 train.max_steps=5 train.epochs=1 \
    train.eval_every_epochs=0 "out_dir=$work/runs" "$@" 2>"$work/err" | tail -1 | python3 -c "import json,sys; print(round(json.load(sys.stdin)['bytes_per_step']))")
  sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  mem=$(build/bin/dtrain bench throughput --models transformer --batches 8 --workers 8 --steps 3 --warmup 1 \
    --strategies "$(printf '%s\n' "$@" | sed -n 's/^parallel.strategy=//p')" \
    $(for kv in "${model[@]}"; do [ "${kv%%=*}" = model.name ] || printf -- '--set %s ' "$kv"; done) \
    $(for kv in "$@"; do [ "${kv%%=*}" = parallel.strategy ] || printf -- '--set %s ' "$kv"; done) 2>/dev/null | tail -1 |
    python3 -c "import json,sys; r=json.load(sys.stdin); k=r['ranks'][0]; print(k['parameters_bytes'], k['gradients_bytes'], k['optimizer_bytes'], round(k['peak_rss_bytes']/1e6))")
  echo "$name | $bytes | $mem"
}
row "dp_replicate 8 (data_parallel)" parallel.strategy=data_parallel
row "dp_shard 8 (zero 3)" parallel.strategy=zero parallel.zero.stage=3
row "dp_replicate 2 x dp_shard 4 (zero 3, HSDP)" parallel.strategy=zero parallel.zero.stage=3 parallel.mesh.dp_replicate=2 parallel.mesh.dp_shard=4
row "dp_replicate 4 x dp_shard 2 (zero 3, HSDP)" parallel.strategy=zero parallel.zero.stage=3 parallel.mesh.dp_replicate=4 parallel.mesh.dp_shard=2
row "pp 2 x dp_replicate 4 (pipeline)" parallel.strategy=pipeline parallel.pipeline.stages=2 parallel.mesh.pp=2 parallel.mesh.dp_replicate=4
row "dp_replicate 2 x dp_shard 4, full recomputation" parallel.strategy=zero parallel.zero.stage=3 parallel.mesh.dp_replicate=2 parallel.mesh.dp_shard=4 train.activation_checkpointing=full
row "dp_replicate 4 x tp 2 (data_parallel)" parallel.strategy=data_parallel parallel.mesh.tp=2
row "dp_shard 4 x tp 2 (zero 3, 2-D)" parallel.strategy=zero parallel.zero.stage=3 parallel.mesh.dp_shard=4 parallel.mesh.tp=2
row "dp_replicate 2 x dp_shard 2 x tp 2 (zero 3, HSDP x tp)" parallel.strategy=zero parallel.zero.stage=3 parallel.mesh.dp_replicate=2 parallel.mesh.dp_shard=2 parallel.mesh.tp=2
row "pp 2 x dp_replicate 2 x tp 2 (pipeline, 3-D)" parallel.strategy=pipeline parallel.pipeline.stages=2 parallel.mesh.pp=2 parallel.mesh.dp_replicate=2 parallel.mesh.tp=2
row "pp 2 x dp_shard 2 x tp 2 (pipeline, 3-D with sharded stages)" parallel.strategy=pipeline parallel.pipeline.stages=2 parallel.mesh.pp=2 parallel.mesh.dp_shard=2 parallel.mesh.tp=2
