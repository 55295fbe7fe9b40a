#!/usr/bin/env python3
"""Reads Tandem's safetensors files with PyTorch alone (a format reader written from the spec, since
python3-safetensors is not in Debian 12), loads model.safetensors strictly into the equivalent
torch.nn model, and writes back the logits for the input and the model's state_dict, laid out as
safetensors.torch.save_file lays it out. Used by tests/train/safetensors_torch_test.cpp.

usage: safetensors_torch_check.py MODEL_FILE INPUT_FILE OUTPUT_FILE
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from safetensors_io import load, save  # noqa: E402


def main():
    model_file, input_file, output_file = sys.argv[1:4]
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3))
    model.load_state_dict(load(model_file), strict=True)
    model.eval()
    with torch.no_grad():
        logits = model(load(input_file)["x"])
    save({"logits": logits, **model.state_dict()}, output_file)


if __name__ == "__main__":
    main()
