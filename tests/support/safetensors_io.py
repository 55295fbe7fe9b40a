"""safetensors files read and written with PyTorch alone (from the format's spec: python3-safetensors
is not in Debian 12), for the tests that hold Tandem to PyTorch: load(path) -> {name: tensor},
save(tensors, path) laid out as safetensors.torch.save_file lays it out."""
import json
import struct

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
