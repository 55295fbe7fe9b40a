#!/usr/bin/env python3
"""The reference of bench/onnx_bench on a GPU: onnxruntime's CUDA execution provider runs
DIR/model.onnx on DIR/input.bin (timed as onnx_bench times Tandem: warm-up, then ITERS runs), and
its logits are compared with DIR/tandem_logits.bin, Tandem's eval forward on the same GPU. One JSON
line; exit 1 when the logits differ by more than TOLERANCE of the largest one, 2 when onnxruntime or
its CUDA provider is missing.
  python3 bench/onnx_ort_bench.py DIR BATCH INPUT_SIZE [--iters 10] [--warmup 2] [--provider cuda|cpu]
"""
import argparse
import json
import sys
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("batch", type=int)
    p.add_argument("input_size", type=int)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--provider", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tolerance", type=float, default=1e-3)
    a = p.parse_args()
    try:
        import onnxruntime as ort
    except ImportError as e:
        print(json.dumps({"error": f"onnxruntime is not installed: {e}"}))
        return 2
    wanted = "CUDAExecutionProvider" if a.provider == "cuda" else "CPUExecutionProvider"
    if wanted not in ort.get_available_providers():
        print(json.dumps({"error": f"{wanted} is not available; onnxruntime {ort.__version__} has "
                                   f"{ort.get_available_providers()}"}))
        return 2
    session = ort.InferenceSession(f"{a.dir}/model.onnx", providers=[wanted])
    x = np.fromfile(f"{a.dir}/input.bin", np.float32).reshape(a.batch, 3, a.input_size, a.input_size)
    # Bound to the device once, as Tandem's input stays on the GPU between its runs.
    binding = session.io_binding()
    device = "cuda" if a.provider == "cuda" else "cpu"
    binding.bind_ortvalue_input("input", ort.OrtValue.ortvalue_from_numpy(x, device, 0))
    binding.bind_output("logits", device)
    for _ in range(a.warmup):
        session.run_with_iobinding(binding)
    binding.synchronize_outputs()
    start = time.perf_counter()
    for _ in range(a.iters):
        session.run_with_iobinding(binding)
    binding.synchronize_outputs()
    seconds = time.perf_counter() - start
    theirs = binding.copy_outputs_to_cpu()[0].reshape(-1)
    ours = np.fromfile(f"{a.dir}/tandem_logits.bin", np.float32)
    largest = float(np.abs(ours).max())
    worst = float(np.abs(ours - theirs).max())
    print(json.dumps({"provider": a.provider, "onnxruntime": ort.__version__,
                      "ort_ms_per_batch": 1e3 * seconds / a.iters, "ort_images_per_s": a.batch * a.iters / seconds,
                      "max_abs_logit": largest, "max_abs_difference": worst,
                      "relative_difference": worst / max(largest, 1e-30), "tolerance": a.tolerance}))
    return 0 if worst <= a.tolerance * largest else 1


if __name__ == "__main__":
    sys.exit(main())
