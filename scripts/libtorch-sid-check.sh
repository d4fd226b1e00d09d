#!/usr/bin/env bash
# dtrain against Debian sid's LibTorch (2.x, CPU) on a bookworm machine: a sid root made once with
# debootstrap, from the mirror this machine's apt already uses for bookworm, dtrain built there and
# its tests run. It checks the LibTorch 2.x build (C++20, the newer c10d, fmt and yaml-cpp) without a
# GPU, and runs what LibTorch 1.13 cannot: the fused optimizer steps and GradScaler's kernels, which
# 2.x has on the CPU too (optim/FusedKernels.h). A developer's tool, run as root (debootstrap, chroot,
# bind mounts); dtrain never needs it.
#   scripts/libtorch-sid-check.sh [CTEST_ARGS...]     e.g. -R 'Fused|LossScaler', or -L unit
#   ROOT [/var/tmp/dtrain-sid]: the sid root, made when missing and kept; BUILD [/build]: the build
#   folder inside it (kept, so a second run builds only what changed); JOBS [nproc]: build jobs. The tests that need a network namespace, ssh, the packaging or the
#   README's install commands (bookworm's apt) are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${ROOT:-/var/tmp/dtrain-sid}
JOBS=${JOBS:-$(nproc)}
BUILD=${BUILD:-/build}
if [ "$(id -u)" != 0 ]; then
  echo "libtorch-sid-check.sh: run as root (debootstrap, chroot and bind mounts)" >&2
  exit 2
fi
if [ ! -x "$ROOT/usr/bin/cmake" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -q debootstrap
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' |
    awk '$2 == "bookworm" && $3 == "main" && $4 == "Packages" { print $1; exit }')
  if [ -z "$mirror" ]; then
    echo "libtorch-sid-check.sh: apt's sources name no bookworm main archive (apt-get indextargets)" >&2
    exit 1
  fi
  packages=g++,cmake,ninja-build,ccache,python3,dataset-fashion-mnist,libtorch-dev,libgloo-dev,libyaml-cpp-dev
  packages+=,nlohmann-json3-dev,gnuplot-nox,openssl,procps
  packages+=,libcli11-dev,libfmt-dev,libgtest-dev,libgmock-dev,libssl-dev,libpng-dev,libjpeg-dev,zlib1g-dev,libsentencepiece-dev
  debootstrap --variant=minbase --include="$packages" sid "$ROOT" "$mirror"
fi
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}" || true; done
}
trap cleanup EXIT
bind() {  # bind SOURCE TARGET [mount options]
  mkdir -p "$2"
  mountpoint -q "$2" && return 0
  mount "${@:3}" "$1" "$2"
  mounts+=("$2")
}
bind "$PWD" "$ROOT$PWD" --bind  # at the same path, so that messages name the files as here
bind proc "$ROOT/proc" -t proc
bind /dev "$ROOT/dev" --bind
chroot "$ROOT" /usr/bin/dpkg-query -W -f='LibTorch ${Version}, ' libtorch-dev
chroot "$ROOT" /usr/bin/g++ --version | head -n 1
# shellcheck disable=SC2016
chroot "$ROOT" /bin/bash -c '
  set -euo pipefail
  cmake -S "$3" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DDTRAIN_WITH_MPI=OFF -DDTRAIN_BUILD_BENCH=OFF > /tmp/configure.log 2>&1 || { tail -n 40 /tmp/configure.log; exit 1; }
  ninja -C "$1" -j "$2"
  cd "$1"
  OMP_NUM_THREADS=1 ctest --output-on-failure --timeout 600 -LE "netns|ssh|package|readme" "${@:4}"
' check "$BUILD" "$JOBS" "$PWD" "$@"
