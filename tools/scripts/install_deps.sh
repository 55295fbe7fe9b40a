#!/usr/bin/env bash
# Installs the Debian packages Tandem builds, tests and trains with, only those missing.
# Safe to run twice: when everything is present it touches nothing and needs no network.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev libisal-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev openmpi-bin
  dataset-fashion-mnist bible-kjv
  clang libomp-dev python3
  # The references the tests hold models to (GPT, ViT, safetensors files); without them those
  # tests skip, saying so.
  python3-torch python3-torchvision python3-yaml
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
