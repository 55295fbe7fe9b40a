#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything (the CUDA plugin too
# when CUDA_HOME points at a toolkit) and runs the whole test suite. Tests labelled `gpu`
# skip, visibly, on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash tools/scripts/install_deps.sh
bash tools/scripts/install_onnxruntime.sh  # onnxruntime itself, which runs the exported models in the tests
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600
