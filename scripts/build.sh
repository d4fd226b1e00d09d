#!/usr/bin/env bash
# Configures and builds dtrain (Release, precompiled headers) into ./build with two jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
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
  cmake -S . -B "$BUILD_DIR" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
