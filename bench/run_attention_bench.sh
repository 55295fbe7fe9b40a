#!/usr/bin/env bash
# Attention forward + backward, ours (bench/attention_bench.cpp: tiled, nothing of size T x T kept)
# against PyTorch's eager attention (bench/pytorch_attention.py), at each sequence length, one process
# per engine and length so each peak is its own, alternating who goes first round by round. Prints
# time and the memory beyond the inputs for each, and the ratios. Builds nothing: build attention_bench
# first (docs/PERFORMANCE.md gives the commands). --precision bf16: ours in bf16 (cpu_attention_bf16.cpp)
# beside PyTorch under torch.cpu.amp.autocast(dtype=torch.bfloat16).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${ATTENTION_BENCH:-$root/build-bench/bench/attention_bench}
python=${PYTHON:-/usr/bin/python3}  # Debian's python3-torch; a pyenv python3 on PATH has no torch
lengths="256 512 1024 2048 4096" rounds=2 extra=()

while [[ $# -gt 0 ]]; do
  case $1 in
    --lengths) lengths=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --batch|--heads|--head-dim|--reps|--warmup|--threads|--causal|--precision) extra+=("$1" "$2"); shift 2 ;;
    *) echo "usage: $0 [--lengths \"256 512 ...\"] [--rounds N] [--batch B] [--heads H] [--head-dim D]" \
            "[--reps N] [--warmup N] [--threads N] [--causal 0|1] [--precision fp32|bf16]" >&2; exit 2 ;;
  esac
done
if [[ ! -x $bin ]]; then
  echo "no $bin; build it: cmake -S $root -B $root/build-bench -G Ninja -DTANDEM_WITH_CUDA=OFF" \
       "-DCMAKE_BUILD_TYPE=Release && ninja -C $root/build-bench attention_bench" >&2
  exit 1
fi
"$python" -c 'import torch' 2>/dev/null || { echo "$python cannot import torch (install python3-torch)" >&2; exit 1; }

# As bench/run_train_bench.sh: glibc keeps freed memory rather than re-faulting it (both engines).
export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-1073741824}
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-33554432}

# PyTorch's matmuls go through the system's libblas.so.3: Debian's reference BLAS (3 GFLOP/s) unless
# an optimised one is installed (libopenblas0-pthread switches the alternative): say which.
echo "PyTorch's BLAS: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)"
results=$(mktemp --suffix=.jsonl)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(lscpu | sed -n 's/^Model name: *//p')"
for ((round = 1; round <= rounds; ++round)); do
  for t in $lengths; do
    ours() { "$bin" --seq-len "$t" "${extra[@]}" | sed "s/^{/{\"round\": $round, /" >>"$results"; }
    theirs() { "$python" "$root/bench/pytorch_attention.py" --seq-len "$t" "${extra[@]}" \
                 | sed "s/^{/{\"round\": $round, /" >>"$results"; }
    if ((round % 2)); then ours; theirs; else theirs; ours; fi
  done
  echo "round $round done (load average $(cut -d' ' -f1-3 /proc/loadavg))"
done
echo "raw results: $results"

"$python" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
first = rows[0]
print(f"\nB={first['batch']} H={first['heads']} D={first['head_dim']} causal={first['causal']} "
      f"{first.get('precision', 'fp32')}, "
      f"{first['threads']} threads; times are medians over rounds of each round's median")
print("| T | ours ms | PyTorch eager ms | time ours / PyTorch | ours extra MiB | PyTorch extra MiB "
      "| memory ours / PyTorch | ours allocator peak MiB |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for t in sorted({r["seq_len"] for r in rows}):
    pick = lambda e, k: [r[k] for r in rows if r["engine"] == e and r["seq_len"] == t]
    med = lambda e, k: statistics.median(pick(e, k)) if pick(e, k) else float("nan")
    mib = lambda b: b / 2**20
    ours_ms, theirs_ms = med("tandem", "ms_p50"), med("pytorch", "ms_p50")
    ours_mem, theirs_mem = med("tandem", "peak_extra_bytes"), med("pytorch", "peak_extra_bytes")
    print(f"| {t} | {ours_ms:.1f} | {theirs_ms:.1f} | {ours_ms / theirs_ms:.2f} | {mib(ours_mem):.0f} "
          f"| {mib(theirs_mem):.0f} | {ours_mem / max(theirs_mem, 1):.3f} | {mib(med('tandem', 'allocator_peak_bytes')):.0f} |")
PY
