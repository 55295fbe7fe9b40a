#!/usr/bin/env python3
"""Reads Tandem's safetensors files with PyTorch alone (a format reader written from the spec, since
python3-safetensors is not in Debian 12), loads model.safetensors strictly into the equivalent
torch.nn model, and writes back the logits for the input and the model's state_dict, laid out as
safetensors.torch.save_file lays it out. Used by tests/train/safetensors_torch_test.cpp.

usage: safetensors_torch_check.py MODEL_FILE INPUT_FILE OUTPUT_FILE
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8}
# safetensors' writer orders data by dtype alignment, largest first, then by name.
ORDER = ["I64", "F32", "I32", "BF16", "F16", "U8"]


def load(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(entry["shape"])
    return out


def save(tensors, path):
    name_of = {v: k for k, v in DTYPES.items()}
    items = sorted(tensors.items(), key=lambda kv: (ORDER.index(name_of[kv[1].dtype]), kv[0]))
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in items:
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": name_of[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


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
