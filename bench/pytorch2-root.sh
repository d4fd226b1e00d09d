#!/usr/bin/env bash
# PyTorch 2.x on the CPU for the peers that need it (FSDP2's fully_shard, DTensor's tensor parallel):
# Debian sid's python3-torch in a sid root made with debootstrap from the mirror this machine's apt
# already uses for bookworm (bookworm's python3-torch is 1.13). The root is the one
# scripts/libtorch-sid-check.sh builds in; made when missing, the packages added when it lacks them.
# Run as root (debootstrap, chroot); prints the versions and whether the distributed APIs import.
#   bench/pytorch2-root.sh            ROOT [/var/tmp/dtrain-sid]
# Then run a peer as: chroot "$ROOT" python3 /path/peer.py (bind the repository in first, as
# bench/tp_compare.sh does).
set -euo pipefail
ROOT=${ROOT:-/var/tmp/dtrain-sid}
# OpenBLAS as on the host (bookworm's libtorch and python3-torch take it through libblas.so.3): without
# it Debian's torch falls back to the reference BLAS, and a transformer step is ten times slower.
packages=python3,python3-torch,python3-numpy,libopenblas0-pthread,procps
if [ "$(id -u)" != 0 ]; then
  echo "pytorch2-root.sh: run as root (debootstrap and chroot)" >&2
  exit 2
fi
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -q debootstrap
  # shellcheck disable=SC2016
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' |
    awk '$2 == "bookworm" && $3 == "main" && $4 == "Packages" { print $1; exit }')
  if [ -z "$mirror" ]; then
    echo "pytorch2-root.sh: apt's sources name no bookworm main archive (apt-get indextargets)" >&2
    exit 1
  fi
  debootstrap --variant=minbase --include="$packages" sid "$ROOT" "$mirror"
elif ! chroot "$ROOT" dpkg-query -W ${packages//,/ } >/dev/null 2>&1; then
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # A mirror's snapshot of sid may be older than its Release file's Valid-Until allows.
  apt=(apt-get -q -o Acquire::Check-Valid-Until=false -o Acquire::Check-Date=false)
  chroot "$ROOT" "${apt[@]}" update
  chroot "$ROOT" "${apt[@]}" install -y --no-install-recommends ${packages//,/ }
fi
# shellcheck disable=SC2016
chroot "$ROOT" dpkg-query -W -f='${Package} ${Version}\n' python3-torch libopenblas0-pthread
mountpoint -q "$ROOT/proc" || { mount -t proc proc "$ROOT/proc"; trap 'umount "$ROOT/proc"' EXIT; }
# The imports the peers need; a failure prints which one and exits non-zero.
chroot "$ROOT" python3 - <<'PY'
import torch, torch.distributed as dist
print("torch", torch.__version__, "distributed", dist.is_available(), "gloo", dist.is_gloo_available())
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
try:
    from torch.distributed.fsdp import fully_shard
    where = "torch.distributed.fsdp"
except ImportError:
    from torch.distributed._composable.fsdp import fully_shard
    where = "torch.distributed._composable.fsdp"
print("init_device_mesh, parallelize_module, ColwiseParallel, RowwiseParallel: ok; fully_shard from", where)
PY
