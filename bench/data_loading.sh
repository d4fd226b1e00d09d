#!/usr/bin/env bash
# Data-loading throughput against threads (the DDP and Apex tutorial's I/O figure): batches from the
# in-memory Fashion-MNIST loader, and reading an image folder (Fashion-MNIST's first 10000 training images
# written once as PNGs) decoded and resized to 64 px. JSON lines on stdout, a table on stderr,
# and the figure in OUT/io.png.
#   bench/data_loading.sh [BUILD_DIR=build] [OUT=bench-out/data]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-bench-out/data}
mkdir -p "$OUT"
"$BUILD/bin/dtrain" bench data --dataset fashion-mnist --image-folder "$OUT/fmnist-png" --export 10000 \
  --image-size 64 --threads 0,1,2,4 --batches 3000 --plot "$OUT/io.png"
