#!/usr/bin/env bash
# dtrain against PyTorch 2.x on one GPU, on a GPU machine without network (the `device` tool's): builds
# only `dtrain` (-O2, -j16) against the machine's pip-installed torch with CUDA and NCCL, then runs
# bench/gpu_compare.sh in the time left, the whole within 7.5 minutes. Bookworm's -dev packages travel
# in .devdeps/ (bench/device/fetch-deps.sh).
#   run: bash bench/device/gpu-compare.sh    (carry .devdeps; output in $OUT: gpu_compare.txt, the table;
#        gpu_compare.jsonl, every run; log.txt; build.txt; deps.txt)
#   BUILD_END [270]: seconds after the start by which the build stops (a build cut short goes on at the
#   next call on the same machine, whose build-gpu/ is kept). END [420]: no benchmark run starts after
#   END - 30 s, and the benchmark is stopped at END + 30 s. gpu_compare.sh's settings pass through
#   (ROUNDS, STEPS, WORKLOADS, PRECISIONS, MODES, CUDA_GRAPH, RUN_TIMEOUT_S).
#   CHECKS=1: the same build also makes the train and optim tests, whose GPU cases run first, for at
#   most CHECKS_S [100] seconds ($OUT/checks.txt), END moving later by as much (run the call with a
#   limit of 580 s): every strategy on the GPU against the CPU, batches copied ahead, the
#   graph-captured step against the eager one, the fused optimizers and the loss scaler on the GPU.
set -uo pipefail  # not -e: a failed step is reported, and the steps that need it stop explicitly
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
T0=$(date +%s)
BUILD_END=${BUILD_END:-270}
CHECKS=${CHECKS:-0}
CHECKS_S=${CHECKS_S:-100}
END=${END:-$((420 + (CHECKS == 1 ? CHECKS_S : 0)))}  # the checks' time added: about 550 s in all
step() { echo "=== [$(($(date +%s) - T0))s] $*"; }
remaining() { echo $(($1 - ($(date +%s) - T0))); }

step probe
nvidia-smi -L
nproc
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu",
  torch.cuda.is_available(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
source bench/device/setup-deps.sh
find_torch

step "deps ($OUT/deps.txt)"
unpack_devdeps >"$OUT/deps.txt" 2>&1 || { tail -n 5 "$OUT/deps.txt"; exit 1; }

step configure
configure_dtrain build-gpu "-O2 -DNDEBUG"

targets=(dtrain)
[ "$CHECKS" = 1 ] && targets+=(dtrain_train_tests dtrain_optim_tests)
step "build ${targets[*]} until ${BUILD_END}s ($OUT/build.txt)"
timeout "$(remaining "$BUILD_END")" ninja -C build-gpu -k 0 -j 16 "${targets[@]}" >"$OUT/build.txt" 2>&1
rc=$?
echo "build rc=$rc"
grep -E "error|FAILED" "$OUT/build.txt" | head -40
tail -n 2 "$OUT/build.txt"
# A test that failed to build leaves dtrain measurable; a dtrain not built to the end does not.
if [ ! -x build-gpu/bin/dtrain ] || ! ninja -C build-gpu -n dtrain | grep -q "no work to do"; then
  echo "no dtrain to measure; a second call on this machine continues the build"
  exit 1
fi
build-gpu/bin/dtrain info 2>&1 | head -20

if [ "$CHECKS" = 1 ]; then
  step "GPU checks, at most ${CHECKS_S}s ($OUT/checks.txt)"
  {
    t=build-gpu/tests
    timeout "$CHECKS_S" bash -c "
      $t/optim/dtrain_optim_tests --gtest_filter='*FusedEqualsForeach*:LossScaler.*'
      $t/train/dtrain_train_tests --gtest_filter='Device.*:Strategies/DeviceStrategies.*:DeviceFeed.*:CudaGraph.*'"
    echo "checks rc=$?"
  } >"$OUT/checks.txt" 2>&1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |rc=|Failure" "$OUT/checks.txt" | head -40
fi

left=$(remaining "$END")
budget=$((left - 30))
[ "$budget" -ge 1 ] || budget=1  # at least the first run
step "bench/gpu_compare.sh: runs start for ${budget}s ($OUT/gpu_compare.txt)"
BUDGET_S=$budget RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-60} PY=python3 JSONL="$OUT/gpu_compare.jsonl" \
  timeout -k 5 $((left + 30)) bash bench/gpu_compare.sh build-gpu >"$OUT/gpu_compare.txt"
echo "gpu_compare rc=$?"
cat "$OUT/gpu_compare.txt"
step done
