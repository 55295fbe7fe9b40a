#!/usr/bin/env bash
# Tandem's eval forward beside onnxruntime on the same exported model and input, on this CPU:
# bench/onnx_bench exports the model and times Tandem; bench/onnx_ort_bench.js times onnxruntime
# (npm's onnxruntime-node, tools/scripts/install_onnxruntime.sh) and compares the logits. Rounds
# alternate the two, as the machine's speed drifts; the ratio is per round.
#   bench/run_onnx_bench.sh [--model resnet50] [--batch 16] [--input-size 224] [--rounds 3] [--iters 5]
set -euo pipefail
cd "$(dirname "$0")/.."
model=resnet50 batch=16 size=224 rounds=3 iters=5
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --input-size) size=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "run_onnx_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
bench=${ONNX_BENCH:-build-bench/bench/onnx_bench}
[[ -x $bench ]] || bench=build/bench/onnx_bench
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'); $(nproc) cores; model $model, batch $batch, ${size}x${size}"
for r in $(seq 1 "$rounds"); do
  ours=$("$bench" --out "$dir" --model "$model" --batch "$batch" --input-size "$size" --iters "$iters")
  theirs=$(node bench/onnx_ort_bench.js "$dir" "$batch" "$size" "$iters" 2 "$(nproc)")
  python3 - "$r" "$ours" "$theirs" <<'PY'
import json, sys
r, ours, theirs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(f"round {r}: export {ours['export_s']:.2f} s ({ours['onnx_bytes'] / 1e6:.1f} MB, {ours['onnx_nodes']} nodes); "
      f"Tandem {ours['tandem_images_per_s']:.1f} img/s, onnxruntime {theirs['ort_images_per_s']:.1f} img/s, "
      f"ratio {ours['tandem_images_per_s'] / theirs['ort_images_per_s']:.2f}x; "
      f"largest logit difference {theirs['max_abs_difference']:.2e} of {theirs['max_abs_logit']:.2f}")
PY
done
