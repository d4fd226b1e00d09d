#!/usr/bin/env bash
# The LibTorch 2.x check on a GPU machine (the `device` tool's, which has no network): builds dtrain
# against the machine's pip-installed torch with CUDA and NCCL, then runs the tests, within about 9
# minutes. Bookworm's -dev packages and sid's Gloo headers travel in .devdeps/ (bench/device/fetch-deps.sh).
#   run: bash bench/device/libtorch2-check.sh     (carry .devdeps; output in $OUT: log.txt, build*.txt,
#        ctest.txt, CMakeCache.txt, fs-probe*.txt).
#   BUBBLE=1 FS_PROBE=0 bash bench/device/libtorch2-check.sh: builds only `dtrain` and the parallel tests
#        (-O2) and runs bench/pipeline_bubble.sh on this machine's CPU cores over gloo (S = 2 and 4) instead
#        of the tests ($OUT/bubble.txt): GPipe's formula judged on cores not shared with another stage,
#        each S on the S cores closest in speed (BIND=auto; BIND="a b c d" names them); then, until TEST_END, the pipeline rows over gloo in REPEATERS copies at once with the
#        crash reporter (the LibTorch 2.11 crash came under ctest -j16, not alone).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
T0=$(date +%s)
step() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }

step probe
nvidia-smi -L; g++ --version | head -1; cmake --version | head -1; echo "ninja $(ninja --version)"; nproc
python3 - <<'P'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available(), torch.cuda.device_count(),
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
P
source bench/device/setup-deps.sh
find_torch
ls "$TORCH_DIR/include" | tr '\n' ' '; echo
ls "$NCCL_ROOT/include" "$NCCL_ROOT/lib" 2>&1 | tr '\n' ' '; echo
grep -n "202002L" "$TORCH_DIR/include/ATen/ATen.h"
nm -D --defined-only "$TORCH_DIR/lib/libtorch_cpu.so" | grep -E ' _ZN4gloo(9allgather|7Context18createUnboundBuffer|9transport13UnboundBuffer)' | head -5
ldconfig -p | grep -E 'libcrypto.so.3|libz.so.1 |libpng16|libjpeg' | head

if [ "${FS_PROBE:-1}" = 1 ]; then  # FS_PROBE=0 skips this first probe (about 17 s)
  step "fs-probe (bench/device/fs-probe.sh: std::filesystem against this LibTorch)"
  bash bench/device/fs-probe.sh "$TORCH_DIR" > "$OUT/fs-probe.txt" 2>&1
  grep -E "^(===|---)|bind to|segv_backtrace" "$OUT/fs-probe.txt" | head -60
fi

step deps
unpack_devdeps || exit 1

step configure
OPT="-O1 -DNDEBUG"; [ "${BUBBLE:-0}" = 1 ] && OPT="-O2 -DNDEBUG"  # -O1: the tests build sooner
configure_dtrain build-dev "$OPT"
cp build-dev/CMakeCache.txt "$OUT/" 2>/dev/null

BUILD_END=${BUILD_END:-400}   # seconds after the start by which the build stops
TEST_END=${TEST_END:-535}     # and the tests
remaining() { echo $(( $1 - ($(date +%s) - T0) )); }
step "build until ${BUILD_END}s"
first=(dtrain_comm_tests dtrain)
grep -q "build tests/comm/dtrain_comm_nccl_tests" build-dev/build.ninja && first+=(dtrain_comm_nccl_tests)
[ "${BUBBLE:-0}" = 1 ] && first=(dtrain dtrain_parallel_tests)
echo "first: ${first[*]}"
timeout $(remaining $BUILD_END) ninja -C build-dev -k 0 -j 16 "${first[@]}" > "$OUT/build1.txt" 2>&1
echo "first targets rc=$?"; grep -E "error|FAILED" "$OUT/build1.txt" | head -60
if [ "${BUBBLE:-0}" = 1 ]; then
  step "pipeline bubble on the CPU cores, gloo (bench/pipeline_bubble.sh)"
  left=$(remaining ${BUBBLE_END:-400}); [ "$left" -gt 60 ] || left=60  # what it printed before the limit stays
  # BIND=auto: each S on the S cores closest in speed (its 16 cores differed 11.8 against 15.1 ms).
  BIND=${BIND:-auto} PY=python3 timeout $left bash bench/pipeline_bubble.sh build-dev 12 1024 \
    "[2048,2048,2048,2048,2048,2048,2048]" "2 4" "data.synthetic_shape=[1,8,8] parallel.backend=gloo" 2>&1 |
    tee "$OUT/bubble.txt"
  echo "bubble rc=${PIPESTATUS[0]}"
  left=$(remaining $TEST_END)
  if [ "$left" -gt 20 ] && [ -x build-dev/tests/parallel/dtrain_parallel_tests ]; then
    n=${REPEATERS:-8}
    step "pipeline rows over gloo, $n copies at once for ${left}s, with segv_backtrace"
    cc -shared -fPIC -O1 -o /tmp/segv_backtrace.so bench/device/segv_backtrace.c
    pids=()
    for ((i = 0; i < n; i++)); do
      LD_PRELOAD=/tmp/segv_backtrace.so timeout $left build-dev/tests/parallel/dtrain_parallel_tests \
        --gtest_filter='*pipeline*gloo*:Cases/PipelineEqualsLocal.*' --gtest_repeat=-1 --gtest_break_on_failure \
        > "/tmp/repeat$i.txt" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"  # not a bare wait: that also waits for the tee of the log above, which never ends
    for ((i = 0; i < n; i++)); do
      r=/tmp/repeat$i.txt
      echo "copy $i: $(grep -c '^\[       OK' $r) passed, $(grep -c '^\[  FAILED' $r) failed, last: $(tail -n 1 $r | head -c 200)"
      grep -E "segv_backtrace|^\[  FAILED|Failure|\(\+0x|\)\[0x" $r | head -40
      grep -q -E "segv_backtrace|FAILED|Failure" $r && tail -c 30000 $r > "$OUT/repeat$i-tail.txt"
    done
  fi
  step done
  exit 0
fi
left=$(remaining $BUILD_END)
if [ "$left" -gt 10 ]; then
  timeout $left ninja -C build-dev -k 0 -j 16 > "$OUT/build2.txt" 2>&1
  echo "all targets rc=$?"; grep -E "error|FAILED" "$OUT/build2.txt" | head -80; tail -2 "$OUT/build2.txt"
fi

step "fs-probe of dtrain's own tests"
bash bench/device/fs-probe.sh --dtrain build-dev > "$OUT/fs-probe-dtrain.txt" 2>&1
head -c 6000 "$OUT/fs-probe-dtrain.txt"

step tests
cd build-dev
./bin/dtrain info 2>&1 | head -30
[ -x tests/comm/dtrain_comm_nccl_tests ] && timeout 90 tests/comm/dtrain_comm_nccl_tests 2>&1 | tail -30
step "training on the GPU (train.device: cuda): every strategy against the CPU, then the command line"
timeout 150 tests/train/dtrain_train_tests --gtest_filter='Device.*:Strategies/DeviceStrategies.*' 2>&1 | tail -40
GPU_RUN=(data.dataset=synthetic "data.synthetic_shape=[1,28,28]" data.synthetic_size=4096 train.max_steps=40
         train.epochs=100 train.device=cuda out_dir=/tmp/gpu-runs)
timeout 60 ./bin/dtrain train "${GPU_RUN[@]}" --name local parallel.strategy=local 2>&1 | tail -4
timeout 60 ./bin/dtrain train --nproc 1 "${GPU_RUN[@]}" --name dp1 parallel.strategy=data_parallel 2>&1 | tail -4
timeout 90 ./bin/dtrain train --nproc 2 "${GPU_RUN[@]}" --name dp2 parallel.strategy=data_parallel parallel.backend=gloo 2>&1 | tail -4
left=$(remaining $TEST_END)
[ "$left" -gt 10 ] && timeout $left ctest -j 16 --timeout 120 --output-on-failure -LE 'netns|ssh|package|readme|fuzz' -E 'Nccl' > "$OUT/ctest.txt" 2>&1
echo "ctest rc=$?"; grep -E "tests passed|\*\*\*|Not Run|Timeout|Failed" "$OUT/ctest.txt" | head -80
# The pipeline over gloo crashed once on torch 2.11, under ctest -j16: the pipeline rows again, with
# the crash reporter preloaded, for what time is left.
left=$(remaining $TEST_END)
if [ "$left" -gt 20 ]; then
  step "pipeline rows over gloo, repeated, with segv_backtrace"
  cc -shared -fPIC -O1 -o /tmp/segv_backtrace.so ../bench/device/segv_backtrace.c
  LD_PRELOAD=/tmp/segv_backtrace.so timeout $left tests/parallel/dtrain_parallel_tests \
    --gtest_filter='*pipeline*gloo*:Cases/PipelineEqualsLocal.*' --gtest_repeat=20 --gtest_break_on_failure 2>&1 |
    grep -E "segv_backtrace|^/|^\[  FAILED|PASSED|FAILED TEST|\(\+0x|\)\[0x" | head -60
  echo "pipeline repeat rc=${PIPESTATUS[0]}"
fi
step done
