#!/usr/bin/python3
# The reference for our input pipeline (bench/run_input_bench.sh): PyTorch's DataLoader reading a
# folder of JPEGs with torchvision's ImageNet training transforms, in images/s, printed as one JSON
# line. Run with Debian's /usr/bin/python3 (python3-torch, python3-torchvision, python3-pil).
#   pytorch_dataloader.py --folder DIR [--workers 2] [--batch 32] [--seconds 10] [--warmup 2]
import argparse
import json
import os
import time

import torch
import torchvision
from torch.utils.data import DataLoader, RandomSampler
from torchvision import transforms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--folder", required=True, help="ImageFolder root: one sub-folder per class")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--warmup", type=float, default=2)
    a = p.parse_args()

    transform = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    dataset = torchvision.datasets.ImageFolder(a.folder, transform=transform)
    # One endless shuffled pass (drawing with replacement), so no epoch boundary restarts the
    # workers inside the measured window: the steady state, as our repeat() pipeline.
    sampler = RandomSampler(dataset, replacement=True, num_samples=1 << 30)
    loader = DataLoader(dataset, batch_size=a.batch, sampler=sampler, num_workers=a.workers, drop_last=True)
    it = iter(loader)
    warm_until = time.perf_counter() + a.warmup
    while time.perf_counter() < warm_until:
        next(it)
    images = 0
    start = time.perf_counter()
    end = start + a.seconds
    while time.perf_counter() < end:
        x, _ = next(it)
        images += x.shape[0]
    elapsed = time.perf_counter() - start
    print(json.dumps({"images_per_second": round(images / elapsed, 1), "images": images, "seconds": round(elapsed, 3),
                      "workers": a.workers, "batch": a.batch, "batch_shape": list(x.shape), "dtype": str(x.dtype),
                      "torch": torch.__version__, "torchvision": torchvision.__version__,
                      "intra_op_threads": torch.get_num_threads(), "pid": os.getpid()}))


if __name__ == "__main__":
    main()
