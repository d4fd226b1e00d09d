#!/usr/bin/env bash
# dtrain's cadmm against DiNNO's own formulation on several seeds, at DiNNO's paper settings
# (configs/decentralized/fmnist_cycle10.yaml with the cadmm overrides of
# configs/experiments/decentralized.yaml: rho 0.5 x1.0003 per round, 2 primal Adam steps, lr 0.005 ->
# 0.0005 on a log scale; 10 nodes on a cycle, one Fashion-MNIST class per node). For each seed, dtrain
# (1 process, 1 thread, train.seed=N) and bench/peer/dinno_peer.py --paper --seed N (PyTorch 1.13,
# 1 thread), each evaluated once after the last round on the first 2000 test images: the nodes' own
# models' top-1, mean (min-max), and the top-1 of the model with the nodes' mean parameters. Ends with
# mean ± sample standard deviation over the seeds of both figures on both sides.
#   bench/cadmm_vs_dinno.sh [BUILD_DIR=build] [SEEDS="0 1 2"] [ROUNDS=2000]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SEEDS=${2:-"0 1 2"}
ROUNDS=${3:-2000}
DTRAIN=$(readlink -f "$BUILD/bin/dtrain")
[ -x "$DTRAIN" ] || { echo "cadmm_vs_dinno.sh: no $BUILD/bin/dtrain; build it first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

CADMM="parallel.decentralized.algorithm=cadmm parallel.decentralized.rho_init=0.5 \
parallel.decentralized.rho_scaling=1.0003 parallel.decentralized.primal_iterations=2 \
optim.name=adam optim.lr=0.005 optim.scheduler.name=log optim.scheduler.final_lr=0.0005"

dtrain_run() {  # seed -> "nodes_mean nodes_min nodes_max average"
  local out="$work/dtrain-$1"
  # shellcheck disable=SC2086
  "$DTRAIN" train configs/decentralized/fmnist_cycle10.yaml out_dir="$out" train.seed="$1" \
    train.max_steps="$ROUNDS" train.eval_every_steps="$ROUNDS" train.eval_at_start=false \
    data.test_subset_size=2000 $CADMM >"$out.log" 2>&1 ||
    { tail -20 "$out.log" >&2; exit 1; }
  python3 - "$(dirname "$(find "$out" -name results.json | head -1)")" "$ROUNDS" <<'EOF'
import json, sys
run, rounds = sys.argv[1], int(sys.argv[2])
r = json.load(open(f"{run}/results.json"))
assert r["steps"] == rounds, (r["steps"], rounds)
ev = [m for m in map(json.loads, open(f"{run}/metrics.jsonl")) if "val/node0/top1" in m and m["step"] == rounds][-1]
nodes = [v for k, v in ev.items() if k.startswith("val/node") and k.endswith("/top1")]
print(sum(nodes) / len(nodes), min(nodes), max(nodes), r["final"]["top1"])
EOF
}

peer_run() {  # seed -> "nodes_mean nodes_min nodes_max average"
  (cd bench/peer && /usr/bin/python3 dinno_peer.py --alg cadmm --paper --seed "$1" --rounds "$ROUNDS" \
    --eval-every "$ROUNDS" --test-size 2000 --threads 1) |
    python3 -c 'import json,sys; r=[json.loads(l) for l in sys.stdin if l.startswith("{")][-1]
print(r["node_top1_mean"], r["node_top1_min"], r["node_top1_max"], r["average_top1"])'
}

for seed in $SEEDS; do
  echo "seed $seed: dtrain cadmm, $ROUNDS rounds ($(date -u +%H:%M:%S))" >&2
  d=$(dtrain_run "$seed")
  echo "dtrain $seed $d" >>"$work/figures"
  echo "seed $seed: dinno_peer.py --paper ($(date -u +%H:%M:%S))" >&2
  p=$(peer_run "$seed")
  echo "peer $seed $p" >>"$work/figures"
done

python3 - "$work/figures" "$ROUNDS" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
fig = {(side, seed): list(map(float, v)) for side, seed, *v in rows}
seeds = list(dict.fromkeys(seed for _, seed, *_ in rows))
print(f"cadmm at DiNNO's paper settings, {sys.argv[2]} rounds; top-1 on the first 2000 test images")
print()
print("| seed | dtrain nodes (min–max) | dtrain average | DiNNO peer nodes (min–max) | DiNNO peer average |")
print("|---|---|---|---|---|")
for s in seeds:
    d, p = fig[("dtrain", s)], fig[("peer", s)]
    print(f"| {s} | {d[0]:.4f} ({d[1]:.4f}–{d[2]:.4f}) | {d[3]:.4f} | {p[0]:.4f} ({p[1]:.4f}–{p[2]:.4f}) | {p[3]:.4f} |")

def spread(side, k):
    xs = [fig[(side, s)][k] for s in seeds]
    sd = f" ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else ""
    return f"{statistics.mean(xs):.4f}{sd}"

print(f"| mean ± sd | {spread('dtrain', 0)} | {spread('dtrain', 3)} | {spread('peer', 0)} | {spread('peer', 3)} |")
EOF
