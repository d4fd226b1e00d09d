#!/usr/bin/env bash
# Configures and builds dtrain (Release, precompiled headers) into ./build with two jobs.
#   SANITIZE=address,undefined scripts/build.sh   the whole tree under sanitizers, into build-asan
#                                                 (scripts/sanitize.sh builds and runs it)
#   FUZZ=1 scripts/build.sh                       tests/fuzz's libFuzzer targets (clang, ASan and
#                                                 UBSan), into build-fuzz; `ctest -L fuzz` runs them
#   TARGETS=dtrain scripts/build.sh               only the named targets (here the dtrain tool and the
#                                                 libraries it links), not the tests, benchmarks and examples
set -euo pipefail
cd "$(dirname "$0")/.."
SANITIZE=${SANITIZE:-}
FUZZ=${FUZZ:-}
options=()
read -r -a targets <<< "${TARGETS:-}"
[ ${#targets[@]} -eq 0 ] || targets=(--target "${targets[@]}")
if [ -n "$FUZZ" ] && [ "$FUZZ" != 0 ]; then
  BUILD_DIR=${BUILD_DIR:-build-fuzz}
  clang=${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
  if [ -z "$clang" ]; then
    echo "build.sh: FUZZ=1 needs clang with libFuzzer: apt-get install clang-14 (or set FUZZ_CXX)" >&2
    exit 1
  fi
  options=(-DCMAKE_CXX_COMPILER="$clang" -DDTRAIN_FUZZ=ON -DDTRAIN_BUILD_TESTS=OFF
           -DDTRAIN_BUILD_BENCH=OFF -DDTRAIN_BUILD_EXAMPLES=OFF -DDTRAIN_SANITIZE="${SANITIZE:-address,undefined}")
  targets=(--target dtrain_fuzzers)
elif [ -n "$SANITIZE" ]; then
  BUILD_DIR=${BUILD_DIR:-build-asan}
  options=(-DDTRAIN_SANITIZE="$SANITIZE")
fi
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# ccache, where installed, makes a rebuild of the same checkout (a new build folder, a branch switched
# back) cost only what changed; the precompiled header is cacheable only with these sloppiness
# settings (ccache's manual, "Precompiled headers"). Another clone misses: CMake's PCH wrapper names
# the header by its absolute path, so the .gch and everything compiled with it hash differently.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "${options[@]}" "$@"
elif [ ${#options[@]} -gt 0 ]; then
  cmake "$BUILD_DIR" "${options[@]}"  # a changed SANITIZE takes effect in an existing tree
fi
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
