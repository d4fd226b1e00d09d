#!/usr/bin/env bash
# What a second worker can add on this host, with no communication and no dtrain at all.
# Each kernel runs for a fixed time in one process alone, then in two processes at once (one thread
# each); the scaling efficiency is their summed rate over twice the lone rate. Kernels:
#   gemm    the mlp's first layer, [64,784] x [784,256] in float32 (vector FMA bound)
#   conv    the lenet5's second convolution, 64 x 6 x 14 x 14 with 16 5x5 filters
#   int     a scalar integer loop in the interpreter (no vector units)
# If the two vCPUs share one physical core's vector units, gemm reads about 0.5, and no two-worker
# training of a compute-bound model can scale past it.
#   bench/host_ceiling.sh [ROUNDS=3] [SECONDS=4]     (needs two CPUs, 0 and 1, for taskset)
set -euo pipefail
ROUNDS=${1:-3}
SECONDS_EACH=${2:-4}
PY=/usr/bin/python3  # Debian's, which has torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/kernel.py" <<'PYEOF'
import sys, time
import torch
torch.set_num_threads(1)
kind, seconds = sys.argv[1], float(sys.argv[2])
if kind == "gemm":
    a, w = torch.randn(64, 784), torch.randn(784, 256)
    step = lambda: torch.mm(a, w)
elif kind == "conv":
    x, w = torch.randn(64, 6, 14, 14), torch.randn(16, 6, 5, 5)
    step = lambda: torch.nn.functional.conv2d(x, w)
else:
    def step():
        s = 0
        for i in range(20000):
            s += i
        return s
step()
n, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    for _ in range(10):
        step()
    n += 10
print(n / (time.perf_counter() - start))
PYEOF

# The lone run is taken before and after the pair, on either vCPU, and averaged: the host's other
# load moves from minute to minute.
echo "| round | kernel | one process, before / after (ops/s) | two at once (ops/s each) | scaling efficiency |"
echo "|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  for kind in gemm conv int; do
    before=$(taskset -c 0 $PY "$work/kernel.py" "$kind" "$SECONDS_EACH")
    taskset -c 0 $PY "$work/kernel.py" "$kind" "$SECONDS_EACH" >"$work/a" &
    taskset -c 1 $PY "$work/kernel.py" "$kind" "$SECONDS_EACH" >"$work/b" &
    wait
    after=$(taskset -c 1 $PY "$work/kernel.py" "$kind" "$SECONDS_EACH")
    $PY - "$round" "$kind" "$before" "$after" "$(cat "$work/a")" "$(cat "$work/b")" <<'PYEOF'
import sys
r, kind, before, after, a, b = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
alone = (before + after) / 2
print(f"| {r} | {kind} | {before:.0f} / {after:.0f} | {a:.0f} + {b:.0f} | {(a + b) / (2 * alone):.2f} |")
PYEOF
  done
done
