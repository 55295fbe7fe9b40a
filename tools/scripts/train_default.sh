#!/usr/bin/env bash
# The README's main command: installs what is missing, builds the trainer (and the CUDA plugin
# when CUDA_HOME points at a toolkit), and runs the default job, ResNet-20 on Fashion-MNIST.
# The trainer converts Debian's Fashion-MNIST to TFRecords under data/ on its first run.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash tools/scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)" --target trainer
exec build/tools/trainer --config configs/resnet.yaml "$@"
