#!/usr/bin/env bash
# dtrain against PyTorch 2.x on four CPU workers arranged as a 2 x 2 device mesh, the same small
# transformer language model on both sides:
#   tp    tensor parallel 2 x zero stage 3 over dp_shard 2 (parallel.mesh.tp=2); PyTorch:
#         parallelize_module on the "tp" dimension, then fully_shard (FSDP2) on "dp_shard"
#   hsdp  zero stage 3, dp_replicate 2 x dp_shard 2; PyTorch: fully_shard on the 2-D mesh
# The peer is bench/peer/transformer_lm_peer.py under Debian sid's python3-torch in the root that
# bench/pytorch2-root.sh makes (run that first). The model: dim 128, depth 4, 4 heads, MLP 4x, 64
# characters of data.dataset text (docs/*.md joined) per sample, 64 samples a step in both
# arrangements (dtrain: data.batch_size 16 on every rank, a tp group stepping on the union of its
# ranks' batches; the peer: 32 per tp group, 16 per HSDP rank), Adam (lr 1e-3), fp32, no dropout,
# one thread per worker. dtrain's tensor-parallel plan is set to
# the peer's: attention and MLP only (embedding and LM head replicated over tp); PLAN=own leaves it
# to dtrain's own, which splits the embedding's and the LM head's vocabulary too.
# Runs alternate A B A B within each round; the table gives median samples/s (the trainer's, after
# the warm-up steps), dtrain / PyTorch per round, and a check that both learn: the loss after the
# last step (dtrain's on 16 test windows, PyTorch's rank 0's last training batch).
#   bench/tp_compare.sh [BUILD_DIR=build] [ROUNDS=2] [STEPS=30]
#   ROOT [/var/tmp/dtrain-sid]; ARRANGEMENTS ["tp hsdp"]; run as root (chroot, bind mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-2}
STEPS=${3:-30}
ROOT=${ROOT:-/var/tmp/dtrain-sid}
ARRANGEMENTS=${ARRANGEMENTS:-"tp hsdp"}
PLAN=${PLAN:-peer}
DTRAIN=$(readlink -f "$BUILD/bin/dtrain")
[ -x "$DTRAIN" ] || { echo "tp_compare.sh: no $BUILD/bin/dtrain; build it first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "tp_compare.sh: run as root (chroot and bind mounts for the peer)" >&2; exit 2; }
if ! { [ -x "$ROOT/usr/bin/python3" ] && chroot "$ROOT" python3 -c "import torch.distributed.fsdp" 2>/dev/null; }; then
  echo "tp_compare.sh: no PyTorch 2.x in $ROOT; make it with bench/pytorch2-root.sh" >&2
  exit 1
fi
# Both sides: one BLAS thread per worker (Debian's torch cannot set OpenBLAS's itself).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# The peer: the loopback for Gloo; the sid torch's TCPStore has no libuv.
peer_env=(GLOO_SOCKET_IFNAME=lo USE_LIBUV=0)

mounts=()
work=$(mktemp -d -p "$ROOT/tmp")  # seen by the peer as ${work#$ROOT}
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}" || true; done
  rm -rf "$work"
}
trap cleanup EXIT
bind() {  # bind SOURCE TARGET [mount options]
  mkdir -p "$2"
  mountpoint -q "$2" && return 0
  mount "${@:3}" "$1" "$2"
  mounts+=("$2")
}
bind "$PWD" "$ROOT$PWD" --bind  # the repository at the same path
bind proc "$ROOT/proc" -t proc
bind /dev "$ROOT/dev" --bind
bind /dev/shm "$ROOT/dev/shm" --bind  # the spawned ranks' queue semaphores
cat docs/*.md >"$work/corpus.txt"
results=$work/results.jsonl
: >"$results"

model=(data.dataset=text "data.text_path=$work/corpus.txt" data.seq_len=64 data.batch_size=16 data.test_subset_size=16
       model.name=transformer model.task=lm model.dim=128 model.depth=4 model.heads=4 model.mlp_ratio=4 model.dropout=0
       optim.name=adam optim.lr=0.001 optim.momentum=null optim.nesterov=null optim.scheduler.name=constant
       parallel.backend=gloo parallel.strategy=zero parallel.zero.stage=3
       train.threads=1 "train.max_steps=$STEPS" train.epochs=1000 train.eval_every_epochs=0
       train.checkpoint_every_epochs=0 train.log_every_steps=1000000 train.seed=1)
# The peer's plan (ColwiseParallel / RowwiseParallel on attention and MLP), in dtrain's plan syntax.
tp_plan='parallel.tensor.plan=["layers.*.attention.qkv=colwise:3","layers.*.attention.projection=rowwise","layers.*.fc1=colwise","layers.*.fc2=rowwise"]'
mesh_args() {  # arrangement
  case $1 in
    tp) echo parallel.mesh.dp_shard=2 parallel.mesh.tp=2 ;;
    hsdp) echo parallel.mesh.dp_replicate=2 parallel.mesh.dp_shard=2 ;;
  esac
}

dtrain_run() {  # round arrangement
  local out=$work/$1-dtrain-$2 extra=()
  mkdir -p "$out"
  [ "$2" = tp ] && [ "$PLAN" = peer ] && extra=("$tp_plan")
  # shellcheck disable=SC2046
  "$DTRAIN" train configs/quickstart.yaml --nproc 4 "${model[@]}" $(mesh_args "$2") "${extra[@]}" \
    "out_dir=$out/runs" >"$out/stdout" 2>"$out/err" ||
    { echo "tp_compare.sh: dtrain $2 failed:" >&2; tail -n 20 "$out/err" >&2; exit 1; }
  tail -n 1 "$out/stdout" | python3 -c "
import json, sys
r = json.load(sys.stdin)
print(json.dumps({'round': $1, 'side': 'dtrain', 'mesh': '$2', 'samples_per_second': r['samples_per_second'],
                  'loss': r['final']['loss'], 'step_time': r['step_time']}))" | tee -a "$results" >&2
}

peer_run() {  # round arrangement
  local out=$work/$1-pytorch-$2 batch=16
  mkdir -p "$out"
  [ "$2" = tp ] && batch=32  # a tp group's batch: dtrain's two ranks' 16 each
  env "${peer_env[@]}" chroot "$ROOT" python3 "$PWD/bench/peer/transformer_lm_peer.py" --mesh "$2" \
    --text "${work#"$ROOT"}/corpus.txt" --seq-len 64 --batch "$batch" --dim 128 --depth 4 --heads 4 --mlp-ratio 4 \
    --steps "$STEPS" --threads 1 --lr 0.001 --seed 1 >"$out/stdout" 2>"$out/err" ||
    { echo "tp_compare.sh: PyTorch $2 failed:" >&2; tail -n 20 "$out/err" >&2; exit 1; }
  tail -n 1 "$out/stdout" | python3 -c "
import json, sys
r = json.load(sys.stdin)
print(json.dumps({'round': $1, 'side': 'pytorch', 'mesh': '$2', 'samples_per_second': r['samples_per_second'],
                  'loss': r['loss'], 'torch': r['torch']}))" | tee -a "$results" >&2
}

# The peer is timed only where it computes what one process does (transformer_lm_peer.py --check).
for arrangement in $ARRANGEMENTS; do
  env "${peer_env[@]}" chroot "$ROOT" python3 "$PWD/bench/peer/transformer_lm_peer.py" --mesh "$arrangement" \
    --text "${work#"$ROOT"}/corpus.txt" --seq-len 64 --dim 128 --depth 4 --heads 4 --mlp-ratio 4 --check 4 \
    2>"$work/check.err" | tail -n 1 >&2 ||
    { echo "tp_compare.sh: the PyTorch $arrangement peer differs from one process:" >&2; tail -n 20 "$work/check.err" >&2; exit 1; }
done

for ((round = 1; round <= ROUNDS; round++)); do
  for arrangement in $ARRANGEMENTS; do
    dtrain_run "$round" "$arrangement"
    peer_run "$round" "$arrangement"
  done
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
names = {"tp": "tp 2 x dp_shard 2 (zero 3 / FSDP2)", "hsdp": "dp_replicate 2 x dp_shard 2 (HSDP)"}
print("| arrangement | dtrain samples/s | PyTorch samples/s | dtrain / PyTorch | per round | last loss dtrain / PyTorch |")
print("|---|---:|---:|---:|---|---|")
for mesh in dict.fromkeys(r["mesh"] for r in rows):
    side = {s: {r["round"]: r for r in rows if r["mesh"] == mesh and r["side"] == s} for s in ("dtrain", "pytorch")}
    rounds = sorted(set(side["dtrain"]) & set(side["pytorch"]))
    ratios = [side["dtrain"][k]["samples_per_second"] / side["pytorch"][k]["samples_per_second"] for k in rounds]
    med = {s: statistics.median(r["samples_per_second"] for r in side[s].values()) for s in side}
    last = rounds[-1]
    loss = lambda s: f'{side[s][last]["loss"]:.2f}'
    print(f'| {names.get(mesh, mesh)} | {med["dtrain"]:.1f} | {med["pytorch"]:.1f} | '
          f'{statistics.median(ratios):.2f}x | {", ".join(f"{x:.2f}" for x in ratios)} | {loss("dtrain")} / {loss("pytorch")} |')
PY
