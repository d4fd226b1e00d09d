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
  zlib1g-dev libsentencepiece-dev libsentencepiece0 dataset-fashion-mnist
sid=$(mktemp -d)
mkdir -p "$sid/lists/partial" "$sid/cache/archives/partial"
# sid from the mirror this machine's apt already uses for bookworm's main archive (its own sources)
mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' |
  awk '$2 == "bookworm" && $3 == "main" && $4 == "Packages" { print $1; exit }')
if [ -z "$mirror" ]; then
  echo "fetch-deps.sh: apt's sources name no bookworm main archive (apt-get indextargets); run apt-get update" >&2
  exit 1
fi
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" > "$sid/sources.list"
o=(-oDir::Etc::SourceList="$sid/sources.list" -oDir::Etc::SourceParts=/dev/null
   -oDir::State::Lists="$sid/lists" -oDir::Cache="$sid/cache")
apt-get "${o[@]}" update -q
apt-get "${o[@]}" download libgloo-dev
rm -rf "$sid"
du -sh .
