#!/usr/bin/env bash
# Installs every Debian bookworm package dtrain needs to build, test and benchmark.
# Idempotent: when everything is installed already it checks and returns within a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache
  libtorch-dev libgloo-dev
  libsentencepiece-dev
  libopenmpi-dev openmpi-bin
  libopenblas0-pthread
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libbenchmark-dev
  libpng-dev libjpeg-dev zlib1g-dev
  libssl-dev openssl
  dataset-fashion-mnist
  gnuplot-nox
  python3-torch
  iproute2
  openssh-client openssh-server
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
