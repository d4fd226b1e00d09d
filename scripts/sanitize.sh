#!/usr/bin/env bash
# Builds the whole tree under AddressSanitizer and UndefinedBehaviorSanitizer (SANITIZE=address,
# undefined scripts/build.sh, into build-asan) and runs the test suite in it, one label after the
# other (unit first), so that a partial run still says something. Any report fails the test that
# made it. LibTorch, Gloo and MPI are not instrumented; scripts/sanitize/*.supp silence reports
# inside them only, each entry with its reason.
#   scripts/sanitize.sh                  # labels unit, multirank, e2e (each with its -slow one)
#   scripts/sanitize.sh unit             # one label
#   CTEST_ARGS="-R Checkpoint" scripts/sanitize.sh unit
#   CXX=clang++-14 scripts/sanitize.sh   # clang's sanitizers instead of g++'s (a new build-asan)
#   BUILD_DIR=build-fuzz SANITIZE_BUILD=0 scripts/sanitize.sh unit
#       the suite in the fuzzing tree (clang, ASan and UBSan, configured with
#       -DDTRAIN_BUILD_TESTS=ON and built), which shares its libraries with the fuzz targets
set -euo pipefail
cd "$(dirname "$0")/.."
export SANITIZE=${SANITIZE:-address,undefined}
export BUILD_DIR=${BUILD_DIR:-build-asan}
if [ "${SANITIZE_BUILD:-1}" != 0 ]; then JOBS=${JOBS:-2} scripts/build.sh; fi

supp=$PWD/scripts/sanitize
# allocator_may_return_null: a size a corrupt file asks for fails as in the normal build
# (std::bad_alloc, which our readers turn into a message) instead of ASan aborting first.
# detect_stack_use_after_return stays off: LibTorch's and Gloo's threads are uninstrumented and the
# fake stacks would cost memory for nothing there.
# fast_unwind_on_malloc=0: whole stacks through LibTorch (built without frame pointers), which
# lsan.supp's function names need.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:allocator_may_return_null=1:detect_leaks=1:check_initialization_order=1:fast_unwind_on_malloc=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp}
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

labels=("$@")
if [ ${#labels[@]} -eq 0 ]; then labels=(unit multirank e2e); fi
status=0
for label in "${labels[@]}"; do
  echo "== sanitize.sh: label ${label} under ${SANITIZE} ($(date -u +%H:%M:%S))"
  # shellcheck disable=SC2086  # CTEST_ARGS is a list of arguments
  (cd "$BUILD_DIR" && ctest -L "^${label}(-slow)?\$" --output-on-failure --timeout 1200 \
     -j "${TEST_JOBS:-1}" ${CTEST_ARGS:-}) || status=1
done
exit $status
