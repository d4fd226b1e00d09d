#!/usr/bin/env bash
# The README's main job: installs every package, builds the dtrain tool (only what it links, no tests),
# and trains LeNet-5 on Fashion-MNIST with two data-parallel workers (configs/quickstart.yaml). Extra
# arguments are passed to `dtrain train`, e.g. scripts/run-main.sh parallel.backend=mpi train.epochs=2
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
TARGETS=dtrain scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec build/bin/dtrain train configs/quickstart.yaml "$@"
