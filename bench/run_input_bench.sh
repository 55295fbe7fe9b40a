#!/usr/bin/env bash
# Our input pipeline against PyTorch's DataLoader on the same JPEGs, on the same two threads:
# ImageNet-style training input (random resized crop to 224, horizontal flip, to float, normalise,
# NCHW, batch 32, shuffled). The images are made once (bench/pipeline_bench --write-folder: 500x375
# photo-like JPEGs, quality 90) as a folder, which PyTorch's ImageFolder reads, and converted into
# TFRecords with `trainer convert --source images`, which `trainer bench-input` reads. The two sides
# then alternate in rounds, so load from other processes drifting over the run hits both; each
# round prints both rates and their ratio, and the end the median ratio (goal: ours >= 2x).
#   bench/run_input_bench.sh [BUILD_DIR]   (env: ROUNDS=5 SECONDS_PER_SIDE=8 IMAGES=1024 THREADS=2)
set -euo pipefail

build=${1:-build}
rounds=${ROUNDS:-5}
seconds=${SECONDS_PER_SIDE:-8}
images=${IMAGES:-1024}
threads=${THREADS:-2}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's, with python3-torch, python3-torchvision and python3-pil

for tool in "$build/bench/pipeline_bench" "$build/tools/trainer"; do
  [[ -x $tool ]] || { echo "missing $tool: ninja -C $build pipeline_bench trainer" >&2; exit 1; }
done
"$python" -c "import torch, torchvision, PIL" || { echo "needs $python with torch, torchvision and PIL" >&2; exit 1; }

work=$(mktemp -d /tmp/tandem-input-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$build/bench/pipeline_bench" --write-folder "$work/images" --images "$images"
"$build/tools/trainer" convert --source images --folder "$work/images" -o "$work/tfrecord" \
  --min-shards 8 > "$work/convert.log" 2>&1 || { cat "$work/convert.log" >&2; exit 1; }

cat > "$work/input.yaml" <<EOF
data:
  files: $work/tfrecord/*.tfrecord
  batch_size: 32
  num_parallel_calls: $threads
  cpu_threads: $threads
  image:
    normalize: true
    layout: nchw
EOF

json_field() { "$python" -c "import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }

echo "$images JPEGs 500x375 q90, batch 32, $threads threads/workers, $seconds s per side, $rounds rounds;" \
  "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
ratios=()
for ((r = 1; r <= rounds; r++)); do
  ours=$("$build/tools/trainer" bench-input --config "$work/input.yaml" --seconds "$seconds" --json \
    2> "$work/ours.log" | json_field total_images_per_second)
  theirs=$("$python" "$here/pytorch_dataloader.py" --folder "$work/images" --workers "$threads" --batch 32 \
    --seconds "$seconds" 2> "$work/theirs.log" | json_field images_per_second)
  ratio=$("$python" -c "print(f'{$ours / $theirs:.2f}')")
  ratios+=("$ratio")
  printf 'round %d: ours %8.1f images/s, PyTorch DataLoader %8.1f images/s, ratio %s (load %s)\n' \
    "$r" "$ours" "$theirs" "$ratio" "$(cut -d' ' -f1 /proc/loadavg)"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | "$python" -c "import sys; v = sys.stdin.read().split(); print(v[len(v) // 2])")
echo "median ratio ours / PyTorch DataLoader: $median (goal >= 2.00); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
