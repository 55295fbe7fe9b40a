#!/usr/bin/env bash
# A training step, ours (bench/train_bench.cpp) against PyTorch (bench/pytorch_train.py), run
# alternately, round by round, so the drift of a shared machine hits both alike; prints the ratio of
# each round, their median, and beside them the floor: our step's convolutions alone (oneDNN's time,
# which PyTorch spends too). --model resnet20 (default), resnet18 or mlp (NCHW only: it has no images);
# or --config FILE: a run config's model, batch and optimizer (the GPT of configs/gpt.yaml, the ViT
# of configs/vit.yaml), NCHW only. --precision bf16 runs both in bf16 (ours: precision bf16; PyTorch's:
# torch.cpu.amp.autocast(dtype=torch.bfloat16)) and also our fp32 step each round, for bf16's gain over it.
# Builds nothing: build train_bench first (docs/PERFORMANCE.md gives the commands).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRAIN_BENCH:-$root/build-bench/bench/train_bench}
python=${PYTHON:-/usr/bin/python3}  # Debian's python3-torch; a pyenv python3 on PATH has no torch
rounds=3 steps=5 warmup=2 threads=0 formats="nchw nhwc" model=resnet20 config="" precision=fp32

while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --format) [[ $2 == both ]] && formats="nchw nhwc" || formats=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    *) echo "usage: $0 [--model resnet20|resnet18|mlp | --config FILE] [--rounds N] [--steps N] [--warmup N] [--threads N]" \
            "[--format nchw|nhwc|both] [--precision fp32|bf16]" >&2; exit 2 ;;
  esac
done

if [[ ! -x $bin ]]; then
  echo "no $bin; build it: cmake -S $root -B $root/build-bench -G Ninja -DTANDEM_WITH_CUDA=OFF" \
       "-DCMAKE_BUILD_TYPE=Release && ninja -C $root/build-bench train_bench" >&2
  exit 1
fi

# glibc keeps freed memory instead of trimming and re-faulting it each step: PyTorch's allocations
# go through malloc and are 1.4-4x faster so; ours (a caching allocator) is unaffected. Both get it.
export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-1073741824}
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-33554432}  # glibc's maximum (32 MiB)

with_torch=1
if ! "$python" -c 'import torch' 2>/dev/null; then
  with_torch=0
  echo "$python cannot import torch (install python3-torch): printing our figures alone"
fi

[[ $model == mlp ]] && formats=nchw  # a flat input: channels_last means nothing to it
[[ -n $config ]] && formats=nchw model=$(basename "$config" .yaml)
# PyTorch's matmuls go through the system's libblas.so.3: Debian's reference BLAS (3 GFLOP/s) unless
# an optimised one is installed (libopenblas0-pthread switches the alternative): say which.
echo "PyTorch's BLAS: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)"
results=$(mktemp --suffix=.jsonl)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)   malloc: MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_" \
     "MALLOC_MMAP_THRESHOLD_=$MALLOC_MMAP_THRESHOLD_   $model $precision, steps $steps after $warmup warm-up, $rounds rounds"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); bf16 instructions: $(grep -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
args=(--steps "$steps" --warmup "$warmup" --threads "$threads" --precision "$precision")
if [[ -n $config ]]; then args+=(--config "$config"); else args+=(--model "$model"); fi
tag() { sed "s/^{/{\"round\": $round, /" >>"$results"; }  # JSON lines, each marked with its round
ours() { "$bin" "${args[@]}" --format "$fmt" --json | tag || echo "train_bench failed ($fmt, round $round)" >&2; }
# Our fp32 step beside a bf16 comparison, marked as its own engine.
ours_fp32() {
  "$bin" "${args[@]/bf16/fp32}" --format "$fmt" --json | sed 's/"engine": "tandem"/"engine": "tandem-fp32"/' | tag ||
    echo "train_bench fp32 failed ($fmt, round $round)" >&2
}
theirs() { "$python" "$root/bench/pytorch_train.py" "${args[@]}" --format "$fmt" | tag || echo "PyTorch failed ($fmt)" >&2; }
for ((round = 1; round <= rounds; ++round)); do
  for fmt in $formats; do
    # Alternate who goes first, so neither always runs in the other's wake.
    if ((with_torch == 0)); then ours
    elif ((round % 2)); then ours; theirs
    else theirs; ours
    fi
    [[ $precision == bf16 ]] && ours_fp32
    echo "round $round $fmt done (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)   raw results: $results"

"$python" - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def pick(engine, fmt, key):
    return {r["round"]: r[key] for r in rows if r["engine"] == engine and r["format"] == fmt}
print("\n| model | format | ours images/s | PyTorch images/s | ours / PyTorch: median (per round) "
      "| step ms ours | step ms PyTorch | convolutions alone ms (share of ours) | peak RSS MiB ours / PyTorch "
      "| page faults per step ours / PyTorch |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for fmt in ("nchw", "nhwc"):
    ours, theirs = pick("tandem", fmt, "images_per_sec"), pick("pytorch", fmt, "images_per_sec")
    if not ours:
        continue
    model = next(r["model"] for r in rows if r["engine"] == "tandem")
    step = lambda engine: {k: v["p50"] for k, v in pick(engine, fmt, "step_ms").items()}
    # Ratios are paired by round (both ran within the same minute), then the median is taken.
    ratios = [ours[k] / theirs[k] for k in sorted(ours) if k in theirs]
    med = lambda d, f=".1f": format(statistics.median(d.values()), f) if d else "-"
    mib = lambda engine: {k: v / 2**20 for k, v in pick(engine, fmt, "peak_rss_bytes").items()}
    conv, step_ours = pick("tandem", fmt, "conv_ms_per_step"), step("tandem")
    share = f"{statistics.median(conv.values()) / statistics.median(step_ours.values()):.0%}" if conv else "-"
    each = ", ".join(f"{r:.2f}" for r in ratios)
    ratio = f"{statistics.median(ratios):.2f} ({each})" if ratios else "-"
    print(f"| {model} | {fmt} | {med(ours)} | {med(theirs)} | {ratio} | {med(step_ours)} | {med(step('pytorch'))} "
          f"| {med(conv)} ({share}) | {med(mib('tandem'), '.0f')} / {med(mib('pytorch'), '.0f')} "
          f"| {med(pick('tandem', fmt, 'page_faults_per_step'))} / {med(pick('pytorch', fmt, 'page_faults_per_step'))} |")
for fmt in ("nchw", "nhwc"):
    ours, fp32 = pick("tandem", fmt, "images_per_sec"), pick("tandem-fp32", fmt, "images_per_sec")
    gains = [ours[k] / fp32[k] for k in sorted(ours) if k in fp32]
    if gains:
        print(f"\n{fmt}: our bf16 step against our fp32 step: {statistics.median(gains):.2f}x median "
              f"({', '.join(f'{g:.2f}' for g in gains)}); our fp32 {statistics.median(fp32.values()):.1f} images/s")
EOF
