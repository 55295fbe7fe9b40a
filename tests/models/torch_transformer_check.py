#!/usr/bin/env python3
"""The PyTorch side of tests/models/transformer_torch_test.cpp: builds the reference model, loads
Tandem's state_dict strictly (so every parameter name must match), runs forward, the mean
cross-entropy and backward, and writes the logits, the loss and every parameter's gradient
("grad.<name>") to OUTPUT_FILE.

  gpt: nanoGPT's GPT (bench/torch_models.py). Input: idx and targets (B, T).
  vit: torchvision's VisionTransformer, its conv_proj given in_channels. Input: x and labels.
  encoder_layer: torch.nn.TransformerEncoderLayer(batch_first=True, dropout 0). Input: x (N, T, E)
      and dy; the loss is sum(y * dy), its "logits" the layer's output y.

usage: torch_transformer_check.py gpt|vit CONFIG_JSON MODEL_FILE INPUT_FILE OUTPUT_FILE
"""
import json
import os
import sys

import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
from safetensors_io import load, save  # noqa: E402
from torch_models import GPT, vit  # noqa: E402


def main():
    kind, config_json, model_file, input_file, output_file = sys.argv[1:6]
    c = json.loads(config_json)
    if kind == "encoder_layer":
        model = nn.TransformerEncoderLayer(c["d_model"], c["nhead"], c["dim_feedforward"], dropout=0.0,
                                           activation=c["activation"], layer_norm_eps=c["layer_norm_eps"],
                                           batch_first=True, norm_first=c["norm_first"])
    else:
        model = GPT(c) if kind == "gpt" else vit(c)
    model.load_state_dict(load(model_file), strict=True)
    inputs = load(input_file)
    if kind == "encoder_layer":
        logits = model(inputs["x"])
        loss = (logits * inputs["dy"]).sum()
    elif kind == "gpt":
        logits = model(inputs["idx"])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), inputs["targets"].reshape(-1))
    else:
        logits = model(inputs["x"])
        loss = F.cross_entropy(logits, inputs["labels"])
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad
    save(out, output_file)


if __name__ == "__main__":
    main()
