#!/usr/bin/python3
# The reference for bench/train_bench.cpp: the same CIFAR-style ResNet-20 (option B projections),
# batch, shapes, optimizer and timing in PyTorch, printing the same figures as JSON lines.
# Run with Debian's /usr/bin/python3 (python3-torch); bench/run_train_bench.sh sets malloc options.
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, CLASSES, SIZE = 128, 10, 28


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or in_planes != planes:  # option B: 1x1 projection + BN, as torchvision
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet20(nn.Module):
    def __init__(self, in_channels=1, num_classes=CLASSES, blocks=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, in_planes = [], 16
        for i, planes in enumerate((16, 32, 64)):
            stage = []
            for b in range(blocks):
                stage.append(BasicBlock(in_planes, planes, 2 if (i > 0 and b == 0) else 1))
                in_planes = planes
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():  # torchvision's initialisation, as our models registry
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.layer3(self.layer2(self.layer1(y)))
        return self.fc(torch.flatten(self.avgpool(y), 1))


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def run(fmt, args):
    torch.manual_seed(1)
    memory_format = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
    model = ResNet20().to(memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(BATCH, 1, SIZE, SIZE).contiguous(memory_format=memory_format)  # made once
    labels = torch.randint(0, CLASSES, (BATCH,))
    steps, fwd, bwd, opt = [], 0.0, 0.0, 0.0
    loss = None
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            start, cpu_start = time.perf_counter(), time.process_time()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        if i >= args.warmup:
            steps.append(t3 - t0)
            fwd, bwd, opt = fwd + t1 - t0, bwd + t2 - t1, opt + t3 - t2
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start  # all threads: comparable with train_bench's figure
    n = args.steps
    return {
        "engine": "pytorch", "torch": torch.__version__, "model": "resnet20", "format": fmt,
        "threads": torch.get_num_threads(), "batch": BATCH, "steps": n, "warmup": args.warmup,
        "images_per_sec": round(BATCH * n / wall, 2),
        "step_ms": {"p50": round(1e3 * percentile(steps, 0.5), 3), "p95": round(1e3 * percentile(steps, 0.95), 3)},
        "cpu_ms_per_step": round(1e3 * cpu / n, 3),
        "breakdown_ms": {"forward": round(1e3 * fwd / n, 3), "backward": round(1e3 * bwd / n, 3),
                         "optimizer": round(1e3 * opt / n, 3)},
        "system_allocations_per_step": None,  # PyTorch's CPU allocator keeps no such count
        "final_loss": round(loss.item(), 5),
        "load_average": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "malloc": {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")},
    }


def main():
    p = argparse.ArgumentParser(description="ResNet-20 training step loop in PyTorch (JSON lines)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="0: every core this process may use")
    p.add_argument("--format", choices=("nchw", "nhwc", "both"), default="both")
    args = p.parse_args()
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    for fmt in ("nchw", "nhwc") if args.format == "both" else (args.format,):
        print(json.dumps(run(fmt, args)), flush=True)


if __name__ == "__main__":
    main()
