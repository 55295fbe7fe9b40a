#!/usr/bin/env python3
"""Seed corpora for the libFuzzer targets of tests/fuzz (tools/scripts/fuzz.sh): small valid inputs
of each format, written here (TFRecord framing with masked CRC32C, tf.Example wire bytes,
safetensors, meta.json), plus the repository's configs and, when present, the TFRecords written by
TensorFlow in ../shared/conformance. Usage: fuzz_seeds.py OUT_DIR"""
import json
import pathlib
import shutil
import struct
import sys


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked(length)) + record + struct.pack("<I", masked(record))


def varint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def field(number: int, payload: bytes) -> bytes:  # a length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(features: dict) -> bytes:
    entries = b""
    for key, (kind, values) in features.items():
        if kind == "bytes":
            inner = b"".join(field(1, v) for v in values)
            value = field(1, inner)
        elif kind == "float":
            value = field(2, field(1, b"".join(struct.pack("<f", v) for v in values)))
        else:
            value = field(3, field(1, b"".join(varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)))
        entries += field(1, field(1, key.encode()) + field(2, value))
    return field(1, entries)


def safetensors(tensors: dict, metadata: dict) -> bytes:
    header, data, offset = {"__metadata__": metadata}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    root = pathlib.Path(__file__).resolve().parents[2]
    dirs = {name: out / f"{name}_fuzz"
            for name in ("tfrecord", "example", "config", "safetensors", "meta_json", "rendezvous")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)

    records = [
        example({"image/encoded": ("bytes", [b"\xff\xd8 jpeg"]), "label": ("int64", [3]), "x": ("float", [0.5, 1.5])}),
        example({"k": ("int64", [1, 2, -3]), "b": ("bytes", [b"v", b""])}),
        b"",
    ]
    for i, r in enumerate(records):
        (dirs["example"] / f"example-{i}").write_bytes(r)
    # The tfrecord target's first byte picks compression (mode % 4), policy and buffer size.
    (dirs["tfrecord"] / "plain").write_bytes(b"\x00" + b"".join(frame(r) for r in records))
    (dirs["tfrecord"] / "plain-skip-tiny-buffer").write_bytes(b"\x87" + b"".join(frame(r) for r in records))
    conformance = root.parent / "shared" / "conformance" / "tfrecord"
    if conformance.is_dir():
        files = sorted(p for p in conformance.rglob("*")
                       if p.is_file() and p.suffix not in (".md", ".json") and p.stat().st_size < 65536)
        for i, f in enumerate(files[:40]):
            (dirs["tfrecord"] / f"conformance-{i}").write_bytes(b"\x03" + f.read_bytes())  # compression: auto

    for f in sorted((root / "configs").glob("*.yaml")):
        shutil.copy(f, dirs["config"] / f.name)

    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    (dirs["safetensors"] / "two").write_bytes(
        safetensors({"w": ("F32", [2, 2], f32), "n": ("I64", [], struct.pack("<q", 7))}, {"format": "pt"}))
    (dirs["safetensors"] / "empty").write_bytes(safetensors({"e": ("F32", [0], b"")}, {}))

    meta = {"format": "tandem-checkpoint", "format_version": 1, "tandem_version": "0.1.0",
            "saved_at": "2026-12-02T23:10:00Z", "step": 12, "epoch": 1,
            "optimizer": {"name": "sgd", "steps_taken": 12, "lr": 0.05},
            "replicas": [{"data_position": {"epoch": 1, "batches": 4, "global_batch": 32},
                          "rng": {"seed": 7, "subsequence": 0, "offset": 12345}}],
            "metrics": {"train_loss": 0.25}, "wall_time_s": 12.5, "config": "model: {name: resnet20}\n",
            "files": {"model.safetensors": {"bytes": 1024, "tensors": 2},
                      "optimizer.safetensors": {"bytes": 512, "tensors": 1}}}
    (dirs["meta_json"] / "meta.json").write_text(json.dumps(meta, indent=2))

    # Rendezvous requests as engine/distribute/bootstrap/protocol.cpp writes them: u32 little-endian
    # numbers and u32-length-prefixed strings after the op.
    def u32(n: int) -> bytes:
        return struct.pack("<I", n)

    def text(s: bytes) -> bytes:
        return u32(len(s)) + s

    hello = (u32(1) + u32(1) + u32(4) + text(b"node-b") + u32(4242) + u32(2) + text(b"cfg") + text(b"0.1.0")
             + text(b"run") + text(b"0123456789abcdef"))
    (dirs["rendezvous"] / "hello").write_bytes(hello)
    (dirs["rendezvous"] / "set").write_bytes(u32(2) + text(b"channel-0/rank_1") + text(b"\x00" * 40))
    (dirs["rendezvous"] / "get").write_bytes(u32(3) + text(b"nccl-unique-id"))
    (dirs["rendezvous"] / "failed").write_bytes(u32(6) + text(b"replica 3 failed: data: a corrupt record"))


if __name__ == "__main__":
    main()
