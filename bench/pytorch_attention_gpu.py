#!/usr/bin/env python3
# The GPU reference for bench/attention_bench.cpp --device cuda: PyTorch's
# F.scaled_dot_product_attention forward + backward at one sequence length, with the inputs' shapes,
# precision and timing of ours (the GPU's work synchronised at the end of each repetition; p50 and min
# in milliseconds; the caching allocator's peak beyond the inputs). --layout packed starts from one
# (B, T, 3 H D) projection split into heads by views, as nanoGPT's CausalSelfAttention does; bf16 runs
# under torch.autocast, which picks the flash kernel. Prints one JSON line like ours.
import argparse
import json
import time

import torch
import torch.nn.functional as F


def attend(inputs, heads, causal, packed):
    if not packed:
        q, k, v = inputs
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    (qkv,) = inputs
    b, t, c3 = qkv.shape
    c = c3 // 3
    q, k, v = (x.view(b, t, heads, c // heads).transpose(1, 2) for x in qkv.split(c, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return y.transpose(1, 2).contiguous().view(b, t, c)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--causal", type=int, default=1)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--layout", choices=["heads", "packed"], default="heads")
    a = p.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    packed = a.layout == "packed"
    c = a.heads * a.head_dim
    shapes = [(a.batch, a.seq_len, 3 * c)] if packed else [(a.batch, a.heads, a.seq_len, a.head_dim)] * 3
    inputs = [torch.randn(s, generator=g, device=dev).requires_grad_() for s in shapes]
    dy = torch.randn((a.batch, a.seq_len, c) if packed else shapes[0], generator=g, device=dev)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    baseline = torch.cuda.memory_allocated()
    times = []
    for i in range(a.warmup + a.reps):
        for x in inputs:
            x.grad = None
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            y = attend(inputs, a.heads, bool(a.causal), packed)
        y.float().backward(dy)
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    print(json.dumps({"engine": "pytorch_sdpa", "device": "cuda", "layout": a.layout, "seq_len": a.seq_len,
                      "batch": a.batch, "heads": a.heads, "head_dim": a.head_dim, "causal": bool(a.causal),
                      "precision": a.precision, "ms_p50": round(times[len(times) // 2], 3),
                      "ms_min": round(times[0], 3),
                      "allocator_peak_extra_bytes": torch.cuda.max_memory_allocated() - baseline,
                      "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
