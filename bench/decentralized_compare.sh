#!/usr/bin/env bash
# Rounds per second of decentralized training, side by side in alternating rounds (A B A B): the
# 10 graph nodes of configs/decentralized/fmnist_cycle10.yaml in one dtrain process (1 thread, and
# 2 threads: the host's two cores), spread over 2 dtrain ranks of 1 thread each, and the authors'
# way in PyTorch 1.13 (bench/peer/dinno_peer.py: every node in one Python process, 1 thread).
# Rounds per second is steps / train_seconds from results.json (evaluation excluded).
#   bench/decentralized_compare.sh [BUILD_DIR=build] [ALGS="dsgd cadmm"] [ROUNDS=200] [REPEATS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ALGS=${2:-"dsgd cadmm"}
ROUNDS=${3:-200}
REPEATS=${4:-2}
DTRAIN=$(readlink -f "$BUILD/bin/dtrain")
[ -x "$DTRAIN" ] || { echo "decentralized_compare.sh: no $BUILD/bin/dtrain; build it first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

alg_args() {  # alg
  case $1 in
    dsgd) echo "parallel.decentralized.algorithm=dsgd" ;;
    cadmm) echo "parallel.decentralized.algorithm=cadmm parallel.decentralized.rho_init=0.5 \
parallel.decentralized.primal_iterations=2 optim.name=adam optim.lr=0.005" ;;
  esac
}

dtrain_rate() {  # alg nproc threads
  # shellcheck disable=SC2046
  "$DTRAIN" train configs/decentralized/fmnist_cycle10.yaml --nproc "$2" out_dir="$work/runs" \
    train.max_steps="$ROUNDS" train.eval_every_steps=0 train.eval_at_start=false train.threads="$3" \
    data.test_subset_size=100 $(alg_args "$1") 2>/dev/null |
    python3 -c 'import json,sys; r=[json.loads(l) for l in sys.stdin if l.startswith("{")][-1]; print(r["steps"]/r["train_seconds"])'
}

peer_rate() {  # alg
  (cd bench/peer && /usr/bin/python3 dinno_peer.py --alg "$1" --rounds "$ROUNDS" --threads 1) |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["rounds_per_second"])'
}

echo "| alg | round | 1 process, 1 thread | 1 process, 2 threads | 2 ranks x 1 thread | PyTorch peer, 1 thread |"
echo "|---|---|---|---|---|---|"
for alg in $ALGS; do
  for r in $(seq 1 "$REPEATS"); do
    a=$(dtrain_rate "$alg" 1 1)
    b=$(dtrain_rate "$alg" 1 2)
    c=$(dtrain_rate "$alg" 2 1)
    d=$(peer_rate "$alg")
    printf '| %s | %s | %.1f | %.1f | %.1f | %.1f |\n' "$alg" "$r" "$a" "$b" "$c" "$d"
  done
done
