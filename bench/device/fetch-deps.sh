#!/usr/bin/env bash
# Fetches what bench/device/libtorch2-check.sh needs on a GPU machine that has no network: Debian
# bookworm's -dev packages of dtrain's dependencies, Fashion-MNIST, and Debian sid's Gloo headers (the
# official LibTorch builds ship none; sid's Gloo of 2025 matches LibTorch 2.11's), into .devdeps/
# (ignored by git). A developer's tool on this machine: apt-get download only, nothing is installed.
#   bench/device/fetch-deps.sh        then carry .devdeps to the device and run libtorch2-check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .devdeps && cd .devdeps
apt-get download libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 \
  libgtest-dev libgmock-dev libssl-dev libssl3 libpng-dev libpng16-16 libjpeg62-turbo-dev libjpeg62-turbo \
  zlib1g-dev dataset-fashion-mnist
sid=$(mktemp -d)
mkdir -p "$sid/lists/partial" "$sid/cache/archives/partial"
echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main' \
  > "$sid/sources.list"
o=(-oDir::Etc::SourceList="$sid/sources.list" -oDir::Etc::SourceParts=/dev/null
   -oDir::State::Lists="$sid/lists" -oDir::Cache="$sid/cache")
apt-get "${o[@]}" update -q
apt-get "${o[@]}" download libgloo-dev
rm -rf "$sid"
du -sh .
