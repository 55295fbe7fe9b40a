#!/usr/bin/env python3
# The reference for bench/gpu_train_bench.cpp: the same ResNet-50 training step in PyTorch on the same
# GPU: synthetic 224x224x3 input, 1000 classes, per-replica batch 256, channels_last, SGD (lr 0.01,
# momentum 0.9, weight decay 1e-4), cudnn.benchmark on, every step ended by a synchronize, warm-up
# steps then timed steps. Precisions: fp32 (no TF32 anywhere), tf32 (TF32 convolutions and matmuls),
# bf16 (autocast to bfloat16, fp32 weights). Prints one JSON line per precision.
#
#   python3 bench/pytorch_resnet50.py [--precision fp32,tf32,bf16] [--batch 256] [--steps 20]
#                                     [--warmup 5] [--format nhwc|nchw] [--model auto|torchvision|plain]
#                                     [--no-cudnn-benchmark] [--device cuda]
#
# --model auto takes torchvision's resnet50 when torchvision imports, else the same network written
# here in torch.nn (torchvision's ResNet-50 v1.5: the stride on the 3x3 convolution). Exit 0: every
# precision ran; 1: one failed (its line says why); 2: no torch or no GPU.
import argparse
import json
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # the device machine has torch; a build machine may not
    print(json.dumps({"engine": "pytorch", "error": f"cannot import torch: {e}"}), flush=True)
    sys.exit(2)

CLASSES, SIZE, CHANNELS = 1000, 224, 3


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes, planes, stride):
        super().__init__()
        width, out = planes, planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or in_planes != out:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    """torchvision's resnet50 layer for layer, for images that lack torchvision."""

    def __init__(self, num_classes=CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(CHANNELS, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        in_planes, stages = 64, []
        for i, (planes, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            stage = []
            for b in range(blocks):
                stage.append(Bottleneck(in_planes, planes, 2 if (i > 0 and b == 0) else 1))
                in_planes = planes * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        y = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        y = self.layer4(self.layer3(self.layer2(self.layer1(y))))
        return self.fc(torch.flatten(self.avgpool(y), 1))


def make_model(choice):
    """(model, source): torchvision's resnet50 when asked or available, else ours."""
    if choice in ("auto", "torchvision"):
        try:
            import torchvision

            return torchvision.models.resnet50(num_classes=CLASSES), f"torchvision {torchvision.__version__}"
        except ImportError:
            if choice == "torchvision":
                raise
    return ResNet50(), "plain torch.nn (torchvision's v1.5 layout)"


def set_tf32(enabled):
    """TF32 for cuDNN convolutions and cuBLAS matmuls, through the API this torch has."""
    value = "tf32" if enabled else "ieee"
    try:  # torch >= 2.9, where the allow_tf32 flags are deprecated
        torch.backends.cuda.matmul.fp32_precision = value
        torch.backends.cudnn.conv.fp32_precision = value
    except (AttributeError, AssertionError):  # older torch: unknown attribute
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(precision, args, device):
    torch.manual_seed(1)
    set_tf32(precision == "tf32")
    memory_format = torch.channels_last if args.format == "nhwc" else torch.contiguous_format
    model, source = make_model(args.model)
    model = model.to(device=device, memory_format=memory_format).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    # Made once, random (never zeros: they run faster than real data on tensor cores).
    x = torch.randn(args.batch, CHANNELS, SIZE, SIZE, device=device).contiguous(memory_format=memory_format)
    labels = torch.randint(0, CLASSES, (args.batch,), device=device)
    use_autocast = precision == "bf16"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_autocast):
            loss = F.cross_entropy(model(x), labels)
        loss.backward()
        optimizer.step()
        return loss

    first_step_s = 0.0
    for i in range(args.warmup):
        t0 = time.perf_counter()
        step()
        synchronize(device)
        if i == 0:
            first_step_s = time.perf_counter() - t0
    synchronize(device)
    start, steps, loss = time.perf_counter(), [], None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        synchronize(device)
        steps.append(time.perf_counter() - t0)
    window = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    result = {
        "engine": "pytorch", "model": "resnet50", "model_source": source, "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "precision": precision, "format": args.format, "batch": args.batch, "steps": args.steps,
        "warmup": args.warmup, "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "images_per_sec": round(args.batch * args.steps / window, 2),
        "step_ms": {"p50": round(1e3 * percentile(steps, 0.5), 3), "p95": round(1e3 * percentile(steps, 0.95), 3)},
        "first_step_ms": round(1e3 * first_step_s, 1), "peak_bytes_allocated": peak,
        "final_loss": round(float(loss.item()), 5),
    }
    del model, optimizer, x, labels, loss
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the next precision starts from the same free memory
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--precision", default="fp32,tf32,bf16", help="comma separated: fp32, tf32, bf16")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--format", choices=("nhwc", "nchw"), default="nhwc")
    p.add_argument("--model", choices=("auto", "torchvision", "plain"), default="auto")
    p.add_argument("--no-cudnn-benchmark", action="store_true")
    p.add_argument("--device", default="cuda", help="cuda, cuda:K, or cpu (only to try the script on a small batch)")
    args = p.parse_args()
    precisions = [s for s in args.precision.split(",") if s]
    if not precisions or any(s not in ("fp32", "tf32", "bf16") for s in precisions):
        p.error(f"--precision takes fp32, tf32, bf16 (comma separated), got {args.precision!r}")
    if args.batch < 1 or args.steps < 1 or args.warmup < 1:
        p.error("--batch, --steps and --warmup must be at least 1")

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"engine": "pytorch", "torch": torch.__version__,
                          "error": "torch.cuda.is_available() is False: no usable GPU"}), flush=True)
        return 2
    torch.backends.cudnn.benchmark = not args.no_cudnn_benchmark
    failed = False
    for precision in precisions:
        try:
            print(json.dumps(run(precision, args, device)), flush=True)
        except Exception as e:  # one precision failing is a finding; the others still run
            failed = True
            print(json.dumps({"engine": "pytorch", "precision": precision, "error": f"{type(e).__name__}: {e}"}),
                  flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
