#!/usr/bin/env bash
# The README's test command: installs every package, builds, and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
# Multi-rank tests oversubscribe two cores; one intra-op thread per rank keeps them honest.
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-1}"
