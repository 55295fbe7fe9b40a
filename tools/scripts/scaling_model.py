#!/usr/bin/env python3
"""Expected scaling efficiency of mirrored data parallelism from an all-reduce bandwidth and a step
time (docs/DISTRIBUTE.md, "How far it scales"). A ring all-reduce of S bytes over N GPUs moves
2(N-1)/N x S through every GPU's slowest link and takes 2(N-1) latency hops:

    T_ar = 2 (N-1)/N x S / B + 2 (N-1) x alpha
    B    = the GPUs' NVLink bus bandwidth inside one node; across nodes the smaller of that and
           the node's network bandwidth (NCCL runs one ring per NIC; each node sends the
           2(N-1)/N x S of every ring once over its NICs)

The bucketed all-reduce overlaps backward (about 2/3 of the step); what does not fit behind it is
exposed:  efficiency = T_step / (T_step + max(0, T_ar - overlap x T_backward)).

usage: scaling_model.py [--step-ms 100] [--grad-mb 102.2] [--gpus-per-node 8]
                        [--nvlink-gbps 360] [--alpha-us 8] [--overlap 0.8]
Every input is an argument: replace the assumptions with what `trainer scaling`, gpu_check.sh and
nccl-tests measured on your machines.
"""
import argparse

NETWORKS = [("100 Gb/s per node", 12.5), ("400 Gb/s per node", 50.0), ("8 x 400 Gb/s per node", 400.0)]


def allreduce_s(n, size_bytes, bus_gbps, alpha_s):
    if n == 1:
        return 0.0
    return 2 * (n - 1) / n * size_bytes / (bus_gbps * 1e9) + 2 * (n - 1) * alpha_s


def efficiency(step_s, ar_s, overlap):
    exposed = max(0.0, ar_s - overlap * (2.0 / 3.0) * step_s)
    return step_s / (step_s + exposed)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step-ms", type=float, default=100.0, help="compute time of one step on one GPU")
    p.add_argument("--grad-mb", type=float, default=102.2, help="gradient bytes all-reduced per step (MB)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--nvlink-gbps", type=float, default=360.0, help="all-reduce bus bandwidth inside a node, GB/s")
    p.add_argument("--alpha-us", type=float, default=8.0, help="latency per ring hop, microseconds")
    p.add_argument("--overlap", type=float, default=0.8, help="share of backward the all-reduce can hide behind")
    p.add_argument("--gpus", default="2,4,8,16,64")
    a = p.parse_args()
    step_s, size, alpha = a.step_ms / 1e3, a.grad_mb * 1e6, a.alpha_us / 1e6
    head = "| GPUs | " + " | ".join(f"{name}: all-reduce ms, efficiency" for name, _ in NETWORKS) + " |"
    print(head)
    print("|---:|" + "---:|" * len(NETWORKS))
    for n in (int(x) for x in a.gpus.split(",")):
        cells = []
        for _, net in NETWORKS:
            bus = a.nvlink_gbps if n <= a.gpus_per_node else min(a.nvlink_gbps, net)
            t = allreduce_s(n, size, bus, alpha)
            cells.append(f"{t * 1e3:.1f} ms, {efficiency(step_s, t, a.overlap) * 100:.0f}%")
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
