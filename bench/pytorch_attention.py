#!/usr/bin/python3
# The reference for bench/attention_bench.cpp: PyTorch's eager attention (q k^T * scale, the causal
# mask, softmax, @ v: what F.scaled_dot_product_attention's math path and most models' own code do,
# keeping the (T, T) probabilities for the backward) forward + backward at one sequence length, with
# the same inputs' shapes, timing and memory measure (peak resident set minus the resident set once
# the inputs exist). Run with Debian's /usr/bin/python3 (python3-torch 1.13, which has no
# F.scaled_dot_product_attention); bench/run_attention_bench.sh runs both.
import argparse
import json
import math
import os
import resource
import time

import torch


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def eager_attention(q, k, v, causal):
    t = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="0: every core this process may use")
    p.add_argument("--causal", type=int, default=1)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: under torch.cpu.amp.autocast(dtype=torch.bfloat16), as a bf16 model runs it")
    a = p.parse_args()
    # torch's default here is omp_get_max_threads(), which reads 1 on our machines: ask for the cores.
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    g = torch.Generator().manual_seed(1)
    shape = (a.batch, a.heads, a.seq_len, a.head_dim)
    q, k, v = (torch.randn(shape, generator=g).requires_grad_() for _ in range(3))
    dy = torch.randn(shape, generator=g)
    baseline = resident_bytes()
    times = []
    for i in range(a.warmup + a.reps):
        for x in (q, k, v):
            x.grad = None
        start = time.perf_counter()
        with torch.cpu.amp.autocast(enabled=a.precision == "bf16", dtype=torch.bfloat16):
            y = eager_attention(q, k, v, bool(a.causal))
        y.float().backward(dy)
        q.grad.sum().item()
        if i >= a.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"engine": "pytorch", "seq_len": a.seq_len, "batch": a.batch, "heads": a.heads,
                      "head_dim": a.head_dim, "causal": bool(a.causal), "precision": a.precision,
                      "threads": torch.get_num_threads(),
                      "ms_p50": round(times[len(times) // 2], 2), "ms_min": round(times[0], 2),
                      "peak_extra_bytes": peak - baseline, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
