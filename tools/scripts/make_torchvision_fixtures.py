#!/usr/bin/python3
"""Writes the fixtures tests/models compares against, from torchvision (Debian's
python3-torchvision): the state_dict names and shapes of resnet18..152, and the logits of
resnet18 (10 classes) in eval mode with deterministic weights on a deterministic input.

The weights follow a formula both sides compute in double precision (see
tests/models/resnet_test.cpp), so no weight file needs committing. Run from the repo root:
    /usr/bin/python3 tools/scripts/make_torchvision_fixtures.py
"""
import math
import pathlib

import torch
import torchvision

OUT = pathlib.Path("tests/models/fixtures")


def deterministic_value(name, shape, t):
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.float64)
    base = torch.sin(0.001 * i * (t + 1) + 0.5 * t)
    if name.endswith("running_var"):
        v = 0.5 + 0.25 * (base + 1)
    elif name.endswith("running_mean") or name.endswith("bias"):
        v = 0.1 * base
    elif len(shape) >= 2:  # conv and linear weights
        v = base * math.sqrt(3.0 / (n // shape[0]))
    else:  # batch norm weight
        v = 1 + 0.1 * base
    return v.reshape(shape).float()


def write_state_dicts():
    with open(OUT / "torchvision_state_dicts.txt", "w") as f:
        f.write(f"# torchvision {torchvision.__version__}: name dtype shape, in state_dict order\n")
        for arch in ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]:
            model = getattr(torchvision.models, arch)()
            f.write(f"model {arch}\n")
            for name, tensor in model.state_dict().items():
                shape = "x".join(str(d) for d in tensor.shape) or "scalar"
                f.write(f"{name} {str(tensor.dtype).replace('torch.', '')} {shape}\n")


def write_logits():
    model = torchvision.models.resnet18(num_classes=10)
    state = model.state_dict()
    t = 0
    for name in state:
        if name.endswith("num_batches_tracked"):
            continue
        state[name] = deterministic_value(name, list(state[name].shape), t)
        t += 1
    model.load_state_dict(state)
    model.eval()
    shape = (2, 3, 64, 64)
    x = torch.sin(0.01 * torch.arange(math.prod(shape), dtype=torch.float64)).reshape(shape).float()
    with torch.no_grad():
        logits = model(x)
    with open(OUT / "resnet18_logits.txt", "w") as f:
        f.write(f"# torchvision {torchvision.__version__} resnet18(num_classes=10), eval, input 2x3x64x64\n")
        for row in logits.tolist():
            f.write(" ".join(f"{v:.9g}" for v in row) + "\n")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    write_state_dicts()
    write_logits()
