#!/usr/bin/env bash
# The README's main job: installs every package, builds, and runs the default distributed job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -f configs/quickstart.yaml ] && build/bin/dtrain --help 2>/dev/null | grep -q ' train'; then
  exec build/bin/dtrain train configs/quickstart.yaml "$@"
fi
exec build/bin/dtrain bench comm --backend gloo --nproc 2 --op allreduce --sizes 4K,1M,16M "$@"
