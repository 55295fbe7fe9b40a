#!/usr/bin/env python3
# The reference for bench/gpu_train_bench.cpp --model gpt2: the same GPT-2 124M training step in
# PyTorch on the same GPU: nanoGPT's model (bench/torch_models.py: block 1024, vocab 50304, 12 layers,
# 12 heads, 768 wide, biases, dropout 0), random tokens, batch 8 x 1024, AdamW (lr 6e-4, betas
# 0.9/0.95, weight decay 0.1 on 2-D weights, as nanoGPT's configure_optimizers), every step ended by
# a synchronize. Attention: eager (spelt out, the (T, T) probabilities kept) and sdpa
# (F.scaled_dot_product_attention, PyTorch's fused kernels). Precisions as bench/pytorch_resnet50.py:
# fp32, tf32, bf16 (autocast). Prints one JSON line per (attention, precision), with tokens/s and
# the model's FLOPs per token (6 N + 12 L C T, PaLM's count, nanoGPT's estimate_mfu) for MFU.
#
#   python3 bench/pytorch_gpt2.py [--attention eager,sdpa] [--precision fp32,tf32,bf16] [--batch 8]
#                                 [--steps 5] [--warmup 2] [--device cuda]
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_resnet50 import percentile, set_tf32, synchronize  # noqa: E402  (exits 2 without torch)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_models  # noqa: E402

BLOCK, VOCAB, TOKENS = 1024, 50304, 50257
CONFIG = {"block_size": BLOCK, "vocab_size": VOCAB, "n_layer": 12, "n_head": 12, "n_embd": 768, "bias": True,
          "dropout": 0.0}


def flops_per_token(model):
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return 6 * n + 12 * CONFIG["n_layer"] * CONFIG["n_embd"] * BLOCK, n


def profile_steps(step, steps, device):
    """Per CUDA kernel milliseconds per step over `steps` more steps, from torch.profiler: the
    reference for bench/gpu_train_bench --profile's per-kernel-table-entry split."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        synchronize(device)
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us > 0:
            rows.append((e.key, us / 1e3 / steps, e.count // steps))
    rows.sort(key=lambda r: -r[1])
    return {"steps": steps, "device_ms": round(sum(r[1] for r in rows), 3),
            "kernels_ms": {k: [round(ms, 3), n] for k, ms, n in rows[:25]}}


def run(attention, precision, args, device):
    torch.manual_seed(1)
    set_tf32(precision == "tf32")
    model = torch_models.GPT(dict(CONFIG, attention=attention)).to(device).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95))
    idx = torch.randint(0, TOKENS, (args.batch, BLOCK), device=device)
    targets = torch.randint(0, TOKENS, (args.batch, BLOCK), device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(idx)
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    synchronize(device)
    start, steps, loss = time.perf_counter(), [], None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        synchronize(device)
        steps.append(time.perf_counter() - t0)
    window = time.perf_counter() - start
    profile = profile_steps(step, args.profile, device) if args.profile > 0 and device.type == "cuda" else None
    fpt, params = flops_per_token(model)
    result = {
        "engine": "pytorch", "model": "gpt2", "attention": attention, "torch": torch.__version__,
        "device": str(device), "precision": precision, "batch": args.batch, "block": BLOCK, "steps": args.steps,
        "warmup": args.warmup, "tokens_per_sec": round(args.batch * BLOCK * args.steps / window, 1),
        "step_ms": {"p50": round(1e3 * percentile(steps, 0.5), 3), "p95": round(1e3 * percentile(steps, 0.95), 3)},
        "peak_bytes_allocated": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "params": params, "flops_per_token": fpt, "final_loss": round(float(loss.item()), 5),
    }
    if profile is not None:
        result["profile"] = profile
    del model, optimizer, idx, targets, loss
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--attention", default="eager,sdpa")
    p.add_argument("--precision", default="fp32,tf32,bf16")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cuda")
    p.add_argument("--profile", type=int, default=0, help="N more steps under torch.profiler: per-kernel times")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"engine": "pytorch", "error": "torch.cuda.is_available() is False: no usable GPU"}))
        return 2
    failed = False
    for attention in args.attention.split(","):
        if attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
            print(json.dumps({"engine": "pytorch", "attention": attention, "error": f"torch {torch.__version__} "
                              "has no F.scaled_dot_product_attention"}), flush=True)
            continue
        for precision in args.precision.split(","):
            try:
                print(json.dumps(run(attention, precision, args, device)), flush=True)
            except Exception as e:  # one configuration failing is a finding; the others still run
                failed = True
                print(json.dumps({"engine": "pytorch", "attention": attention, "precision": precision,
                                  "error": f"{type(e).__name__}: {e}"}), flush=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
