#!/usr/bin/python3
# The reference for bench/train_bench.cpp: the same models (CIFAR-style ResNet-20 with option B
# projections, torchvision's ResNet-18, the MLP; with --config, a run config's GPT or ViT from
# bench/torch_models.py), batches, shapes, optimizer and timing in PyTorch, printing the same
# figures as JSON lines. Run with Debian's /usr/bin/python3 (python3-torch);
# bench/run_train_bench.sh sets the malloc options.
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

# model: (batch, channels, size, classes), as train_bench's workloads() table.
WORKLOADS = {"resnet20": (128, 1, 28, 10), "resnet18": (32, 3, 64, 200), "mlp": (128, 1, 28, 10)}


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


def init_convs(model):  # torchvision's initialisation, as our models registry
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


class ResNet20(nn.Module):
    def __init__(self, in_channels, num_classes, blocks=3):
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
        init_convs(self)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.layer3(self.layer2(self.layer1(y)))
        return self.fc(torch.flatten(self.avgpool(y), 1))


class ResNet18(nn.Module):  # torchvision's resnet18: 7x7 stem, max pool, four stages of two blocks
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, in_planes = [], 64
        for i, planes in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            stages.append(nn.Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1)))
            in_planes = planes
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        init_convs(self)

    def forward(self, x):
        y = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(self.layers(y)), 1))


def mlp(in_features, num_classes, hidden=(512, 512)):
    layers, width = [nn.Flatten()], in_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, num_classes))


def make_model(name, channels, size, classes):
    if name == "resnet20":
        return ResNet20(channels, classes)
    if name == "resnet18":
        return ResNet18(channels, classes)
    return mlp(channels * size * size, classes)


def reset_peak_rss():
    # As train_bench: Linux resets VmHWM to the current RSS on "5" to clear_refs.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def from_config(path):
    """The model, batch, inputs and optimizer of a run config (its model, train and optimizer sections)."""
    import yaml
    doc = yaml.safe_load(open(path))
    c = torch_models.model_config(doc["model"])
    train = doc.get("train", {})
    batch = train.get("global_batch_size") or train["per_replica_batch_size"]
    if c["name"] == "gpt":
        model = torch_models.GPT(c)
        x = torch.randint(0, c["vocab_size"], (batch, c["block_size"]))
        labels = torch.randint(0, c["vocab_size"], (batch, c["block_size"]))
    elif c["name"] == "vit":
        model = torch_models.vit(c)
        x = torch.randn(batch, c["in_channels"], c["image_size"], c["image_size"])
        labels = torch.randint(0, c["num_classes"], (batch,))
    else:
        raise SystemExit(f"--config: model {c['name']} has no PyTorch twin here (use --model)")
    o = doc.get("optimizer", {})
    decay = o.get("weight_decay", 0.0)
    if o.get("exclude_norm_and_bias_from_weight_decay", False):  # nanoGPT's rule: 2-D weights decay
        params = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": decay},
                  {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    else:
        params = [{"params": list(model.parameters()), "weight_decay": decay}]
    if o.get("name", "sgd") == "adamw":
        optimizer = torch.optim.AdamW(params, lr=o.get("lr", 0.1), betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                                      eps=o.get("eps", 1e-8))
    else:
        optimizer = torch.optim.SGD(params, lr=o.get("lr", 0.1), momentum=o.get("momentum", 0.9))
    return c["name"], batch, model, x, labels, optimizer


def run(fmt, args):
    torch.manual_seed(1)
    if args.config:
        name, batch, model, x, labels, optimizer = from_config(args.config)
    else:
        name = args.model
        batch, channels, size, classes = WORKLOADS[args.model]
        memory_format = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
        model = make_model(args.model, channels, size, classes).to(memory_format=memory_format)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(batch, channels, size, size).contiguous(memory_format=memory_format)  # made once
        labels = torch.randint(0, classes, (batch,))
    steps, fwd, bwd, opt = [], 0.0, 0.0, 0.0
    loss = None
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            reset_peak_rss()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start, cpu_start = time.perf_counter(), time.process_time()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.cpu.amp.autocast(enabled=args.precision == "bf16", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1))
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
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {
        "engine": "pytorch", "torch": torch.__version__, "model": name, "format": fmt, "precision": args.precision,
        "threads": torch.get_num_threads(), "batch": batch, "steps": n, "warmup": args.warmup,
        "images_per_sec": round(batch * n / wall, 2),
        "step_ms": {"p50": round(1e3 * percentile(steps, 0.5), 3), "p95": round(1e3 * percentile(steps, 0.95), 3)},
        "cpu_ms_per_step": round(1e3 * cpu / n, 3),
        "breakdown_ms": {"forward": round(1e3 * fwd / n, 3), "backward": round(1e3 * bwd / n, 3),
                         "optimizer": round(1e3 * opt / n, 3)},
        "system_allocations_per_step": None,  # PyTorch's CPU allocator keeps no such count
        "page_faults_per_step": round(faults / n, 1),
        "peak_rss_bytes": peak_rss_bytes(),
        "final_loss": round(loss.item(), 5),
        "load_average": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "malloc": {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")},
    }


def main():
    p = argparse.ArgumentParser(description="A training step loop in PyTorch (JSON lines)")
    p.add_argument("--model", choices=tuple(WORKLOADS), default="resnet20")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="0: every core this process may use")
    p.add_argument("--format", choices=("nchw", "nhwc", "both"), default="both")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: torch.cpu.amp.autocast(dtype=torch.bfloat16) around the forward")
    p.add_argument("--config", help="a run config: its model (gpt or vit), train batch and optimizer")
    args = p.parse_args()
    if args.config and args.format == "both":
        args.format = "nchw"
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    for fmt in ("nchw", "nhwc") if args.format == "both" else (args.format,):
        print(json.dumps(run(fmt, args)), flush=True)


if __name__ == "__main__":
    main()
