#!/usr/bin/env python3
"""The reports of tools/scripts/gpu_check.sh: gpu_check.json (every figure) and gpu_check.md (the
same, to read), from the step logs under $logs. gpu_check.sh runs it after every step (so a call cut
off at its limit still brings reports back) with these in the environment: work, pk, logs,
GPU_CHECK_OUT, GPU_CHECK_HINT (ran / no_gpu / not_packed), GPU_CHECK_REASON, GPU_CHECK_WALL,
GPU_CHECK_BUDGET, r50_steps, r50_warmup. Exit 0: all ok; 1: something needs attention; 2: no GPU.
"""
import csv, glob, json, os, re, time
import xml.etree.ElementTree as ET

E = os.environ
work, pk, logs, out = E["work"], E["pk"], E["logs"], E["GPU_CHECK_OUT"]
hint = E["GPU_CHECK_HINT"]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def json_lines(text):
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    return found


def last_lines(path, n=3):
    lines = [l for l in read(path).splitlines() if l.strip()]
    return " | ".join(lines[-n:])[-600:]


manifest = dict(l.split("=", 1) for l in read(f"{pk}/MANIFEST").splitlines() if "=" in l)
steps = []
for line in read(f"{logs}/steps.tsv").splitlines():
    name, status, rc, secs, limit, start, end, note = (line.split("\t") + [""] * 8)[:8]
    steps.append({"name": name, "status": status, "exit_code": int(rc) if rc else None, "seconds": float(secs or 0),
                  "limit_s": int(limit or 0), "start": float(start or 0), "end": float(end or 0), "note": note,
                  "log": f"logs/{name}.log"})
step = {s["name"]: s for s in steps}
os_release = dict(l.split("=", 1) for l in read("/etc/os-release").splitlines() if "=" in l)
report = {
    "schema": 1, "hint": hint, "reason": E.get("GPU_CHECK_REASON", ""),
    "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - int(E["GPU_CHECK_WALL"]))),
    "wall_s": int(E["GPU_CHECK_WALL"]), "budget_s": int(E["GPU_CHECK_BUDGET"]),
    "host": {"os": os_release.get("PRETTY_NAME", "").strip('"'), "kernel": os.uname().release,
             "cpus": os.cpu_count(), "glibc": os.confstr("CS_GNU_LIBC_VERSION")},
    "pack": manifest, "ld_library_path": read(f"{logs}/ld_library_path.txt").strip(),
    "libraries": dict(l.split("\t", 1) for l in read(f"{logs}/libraries.tsv").splitlines() if "\t" in l),
    "ldd_problems": [l for l in read(f"{logs}/ldd_problems.txt").splitlines() if l.strip()],
    "steps": steps,
}

# nvidia-smi
rows = list(csv.reader(read(f"{logs}/nvidia_smi.csv").splitlines()))
gpu = {h.strip(): v.strip() for h, v in zip(rows[0], rows[1])} if len(rows) > 1 else {}
gpu["list"] = read(f"{logs}/nvidia_smi_L.txt").strip()
gpu["compute_cap"] = read(f"{logs}/nvidia_smi_cc.txt").strip()
report["gpu"] = gpu
report["doctor"] = load_json(f"{logs}/doctor.json")

# gpu tests: ctest's summary and JUnit file, or gtest's JSON files
log = read(f"{logs}/gpu_tests.log")
tests = {"runner": (re.findall(r"^runner: (\w+)", log, re.M) or ["none"])[0], "failed_names": [], "skipped": []}
junit = f"{logs}/ctest_junit.xml"
if tests["runner"] == "ctest" and os.path.exists(junit):
    try:
        cases = list(ET.parse(junit).getroot().iter("testcase"))
    except ET.ParseError:
        cases = []
    tests["total"] = len(cases)
    for c in cases:
        name = c.get("name")
        if c.find("failure") is not None or c.get("status") == "fail":
            tests["failed_names"].append(name)
        elif c.find("skipped") is not None or c.get("status") in ("notrun", "disabled"):
            text = (c.findtext("system-out") or "").splitlines()
            why = [text[i + 1] for i, l in enumerate(text[:-1]) if l.rstrip().endswith("Skipped")]
            tests["skipped"].append({"name": name, "why": (why or [""])[0][:300]})
else:
    m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", log)
    if m:
        tests["total"] = int(m.group(3))
        tests["failed_names"] = re.findall(r"^\s*\d+ - (\S+) \((?:Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Not Run)", log, re.M)
    total = 0
    for path in sorted(glob.glob(f"{logs}/gtest_*.json")):
        doc = load_json(path) or {}
        for suite in doc.get("testsuites", []):
            for t in suite.get("testsuite", []):
                total += 1
                name = f"{suite.get('name')}.{t.get('name')}"
                if t.get("failures"):
                    tests["failed_names"].append(name)
                elif t.get("result") == "SKIPPED":
                    tests["skipped"].append({"name": name, "why": (t.get("skipped") or [{}])[0].get("message", "")[:300]
                                             if isinstance(t.get("skipped"), list) else ""})
    if total:
        tests["total"] = total
listed = re.search(r"^runner: ctest \((\d+) tests", log, re.M)
tests["listed"] = int(listed.group(1)) if listed else tests.get("total", 0)
# gtest's JSON has no skip message: the reasons are the lines after "Skipped" in the log.
lines = log.splitlines()
tests["skip_reasons"] = sorted({t["why"] for t in tests["skipped"] if t["why"]} or
                               {lines[i + 1][:300] for i, l in enumerate(lines[:-1]) if l.rstrip().endswith("Skipped")})
tests["failed"] = len(tests["failed_names"])
tests["passed"] = max(0, tests.get("total", 0) - tests["failed"] - len(tests["skipped"]))
report["tests"] = tests

# compute-sanitizer
san = {"kernel_filter": "kns=tandem" if "--kernel-name" in read(f"{logs}/sanitizer.log") else "none", "binaries": {}}
for path in sorted(glob.glob(f"{logs}/sanitizer_*.log")):
    name = os.path.basename(path)[len("sanitizer_"):-len(".log")]
    text = read(path)
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    doc = load_json(f"{logs}/sanitizer_{name}.json") or {}
    san["binaries"][name] = {"errors": int(m.group(1)) if m else None, "finished": bool(m),
                             "tests": doc.get("tests"), "test_failures": doc.get("failures"),
                             "first_errors": [l for l in text.splitlines() if l.startswith("========= ") and
                                              ("Invalid" in l or "Error" in l)][:5]}
report["sanitizer"] = san

# ResNet-20, one epoch
summary = load_json(f"{work}/runs/resnet20/run_summary.json")
r20 = {"run_summary": summary}
if summary:
    fm = summary.get("final_metrics", {})
    r20.update({"images_per_sec": summary.get("images_per_sec"), "train_loss": fm.get("train_loss"),
                "eval_top1": fm.get("eval_top1"), "eval_loss": fm.get("eval_loss"), "steps": summary.get("steps"),
                "wall_time_s": summary.get("wall_time_s"), "device": summary.get("device"),
                "step_time_ms": summary.get("step_time_ms"), "input_bound_verdict": summary.get("input_bound_verdict")})
    train_top1 = [r for r in csv.DictReader(read(f"{work}/runs/resnet20/metrics.csv").splitlines())
                  if r.get("tag") == "train/top1"]
    if train_top1:
        r20["train_top1_last_logged"] = float(train_top1[-1]["value"])
elif "resnet20" in step:
    r20["error"] = last_lines(f"{logs}/resnet20.log")
report["resnet20"] = r20

# ResNet-50: ours and PyTorch's, and their ratio
r50 = {"tandem": {}, "pytorch": {}, "ratio_tandem_over_pytorch": {}}
for p in ("fp32", "tf32", "bf16"):
    got = [d for d in json_lines(read(f"{logs}/r50_tandem_{p}.log")) if "images_per_sec" in d]
    if got:
        r50["tandem"][p] = got[0]
    elif step.get(f"r50_tandem_{p}", {}).get("status", "skipped") != "skipped":
        r50["tandem"][p] = {"error": last_lines(f"{logs}/r50_tandem_{p}.log")}
for d in json_lines(read(f"{logs}/r50_pytorch.log")):
    if d.get("precision"):
        r50["pytorch"][d["precision"]] = d
    elif d.get("error"):
        r50["pytorch"]["error"] = d["error"]
for p in ("fp32", "tf32", "bf16"):
    a, b = r50["tandem"].get(p, {}).get("images_per_sec"), r50["pytorch"].get(p, {}).get("images_per_sec")
    r50["ratio_tandem_over_pytorch"][p] = round(a / b, 3) if a and b else None
report["resnet50"] = r50

# GPT-2 124M: ours and PyTorch's (eager attention and SDPA), tokens/s and MFU against the GPU's peak
# dense throughput for the precision (H200 SXM: 989 TFLOPS bf16, 495 tf32, 67 fp32, NVIDIA's figures).
PEAK_TFLOPS = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4}
gpt2 = {"tandem": {}, "pytorch": {}, "peak_tflops": PEAK_TFLOPS, "errors": []}
for d in json_lines(read(f"{logs}/gpt2_tandem.log")):
    if d.get("tokens_per_sec"):
        gpt2["tandem"][d["precision"]] = d
for line in read(f"{logs}/gpt2_tandem.log").splitlines():
    if "step failed" in line:
        gpt2["errors"].append(line[-400:])
for d in json_lines(read(f"{logs}/gpt2_pytorch.log")):
    if d.get("error"):
        gpt2["errors"].append(f"pytorch {d.get('attention', '')} {d.get('precision', '')}: {d['error'][:300]}")
    elif d.get("tokens_per_sec"):
        gpt2["pytorch"].setdefault(d["attention"], {})[d["precision"]] = d
fpt = next((d["flops_per_token"] for a in gpt2["pytorch"].values() for d in a.values()), 6 * 123.69e6 + 12 * 12 * 768 * 1024)
gpt2["flops_per_token"] = fpt
for who in [gpt2["tandem"]] + list(gpt2["pytorch"].values()):
    for p, d in who.items():
        d["mfu"] = round(d["tokens_per_sec"] * fpt / (PEAK_TFLOPS[p] * 1e12), 4)
report["gpt2"] = gpt2
if "gpt2_tandem" in step and step["gpt2_tandem"]["status"] != "skipped" and not gpt2["tandem"]:
    gpt2["errors"].append("tandem: " + last_lines(f"{logs}/gpt2_tandem.log"))

# ONNX: Tandem's GPU eval forward of ResNet-50 beside onnxruntime's CUDA provider on the exported file
onnx = {}
for d in json_lines(read(f"{logs}/onnx_r50.log")):
    onnx.update({("tandem" if "tandem_images_per_s" in d else "onnxruntime"): d})
if onnx.get("tandem", {}).get("tandem_images_per_s") and onnx.get("onnxruntime", {}).get("ort_images_per_s"):
    onnx["ratio_tandem_over_onnxruntime"] = round(onnx["tandem"]["tandem_images_per_s"] /
                                                  onnx["onnxruntime"]["ort_images_per_s"], 3)
report["onnx"] = onnx
# TensorBoard's reader on the ResNet-20 run's event files
report["tensorboard"] = next((d for d in json_lines(read(f"{logs}/tensorboard.log")) if "tensorboard_runs" in d), {})

# Device memory in use (nvidia-smi every 0.5 s): the whole check's peak and each step's
samples = []
for line in read(f"{logs}/gpu_memory.csv").splitlines():
    parts = [x.strip() for x in line.split(",")]
    try:
        stamp, frac = (parts[0].split(".") + ["0"])[:2]
        samples.append((time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac), int(parts[1])))
    except (ValueError, IndexError):
        pass
memory = {"samples": len(samples), "peak_used_mib": max((m for _, m in samples), default=None),
          "idle_used_mib": samples[0][1] if samples else None, "per_step_peak_used_mib": {}}
for s in steps:
    inside = [m for t, m in samples if s["start"] - 0.5 <= t <= s["end"] + 0.5]
    if inside:
        memory["per_step_peak_used_mib"][s["name"]] = max(inside)
memory["tandem_allocator_peak_bytes"] = {p: d.get("peak_bytes_in_use") for p, d in r50["tandem"].items()}
memory["pytorch_peak_allocated_bytes"] = {p: d.get("peak_bytes_allocated") for p, d in r50["pytorch"].items()
                                          if isinstance(d, dict)}
report["memory"] = memory

# Verdict
problems = []
if hint == "no_gpu":
    problems.append(f"no GPU: {report['reason']}")
elif hint == "not_packed":
    problems.append(report["reason"])
for key in ("targets_missing", "targets_stale"):
    if manifest.get(key, "").strip():
        problems.append(f"pack: {key.split('_')[1]} targets: {manifest[key]}")
if report["ldd_problems"]:
    problems.append(f"ldd: {len(report['ldd_problems'])} unresolved libraries (first: {report['ldd_problems'][0]})")
for s in steps:
    if s["status"] not in ("ok",) and not (s["status"] == "skipped" and s["note"] == "--skip"):
        problems.append(f"step {s['name']}: {s['status']}" + (f" (exit {s['exit_code']})" if s["exit_code"] else "")
                        + (f", {s['note']}" if s["note"] else ""))
if tests["failed"]:
    problems.append(f"gpu tests: {tests['failed']} failed: {', '.join(tests['failed_names'][:10])}")
if tests["listed"] > tests.get("total", 0):
    problems.append(f"gpu tests: {tests['listed'] - tests.get('total', 0)} of {tests['listed']} never ran (out of time)")
if tests["skipped"] and hint == "ran":
    problems.append(f"gpu tests: {len(tests['skipped'])} skipped on a GPU machine ({'; '.join(tests['skip_reasons'])[:300]})")
for name, b in san["binaries"].items():
    if b["errors"]:
        problems.append(f"compute-sanitizer: {b['errors']} memcheck errors in {name}")
status = {"no_gpu": "no_gpu", "not_packed": "not_packed"}.get(hint, "ok" if not problems else "attention")
report["status"], report["problems"] = status, problems
attention = [d for d in json_lines(read(f"{logs}/attention.log")) if d.get("device") == "cuda"]
report["attention"] = attention
with open(f"{out}/gpu_check.json", "w") as f:
    json.dump(report, f, indent=2)


# Markdown
def kernel_split(title, prof, count):
    """One line of gpu_train_bench --profile's split: the `count` slowest kernel-table entries."""
    top = sorted(prof.get("kernels_ms", {}).items(), key=lambda kv: -kv[1][0])[:count]
    return (f"- {title} ({prof['steps']} fenced steps of {prof['step_ms']:.1f} ms; outside kernels "
            f"{prof['outside_kernels_ms']:.1f} ms): " + ", ".join(f"{name} {ms:.1f} ms ({calls} calls)" for name, (ms, calls) in top))


def num(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)


def gib(v):
    return "-" if not v else f"{v / 2**30:.2f}"


md = [f"# GPU check: {status}", ""]
md.append(f"{report['started_at']}, {gpu.get('name', 'no GPU')}, driver {gpu.get('driver_version', '-')}, "
          f"{report['host']['os']} ({report['host']['glibc']}); pack {manifest.get('git_commit', '?')[:12]} "
          f"({manifest.get('git_dirty_files', '?')} files uncommitted) built {manifest.get('built_at', '?')}, "
          f"sm {manifest.get('cuda_architectures', '?')}; {report['wall_s']} s of a {report['budget_s']} s budget.")
md += ["", "## Problems", ""] + ([f"- {p}" for p in problems] or ["none"])
md += ["", "## Steps", "", "| step | status | seconds | limit s | peak GPU memory used, MiB |", "|---|---|---|---|---|"]
for s in steps:
    md.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {s['limit_s']} | "
              f"{memory['per_step_peak_used_mib'].get(s['name'], '-')} |")
md += ["", f"Peak device memory in use over the whole check (nvidia-smi): {memory['peak_used_mib'] or '-'} MiB "
       f"(idle {memory['idle_used_mib'] or '-'} MiB)."]
md += ["", "## GPU tests", "", f"runner {tests['runner']}: {tests['listed']} listed, {tests.get('total', 0)} ran, {tests['passed']} passed, "
       f"{tests['failed']} failed, {len(tests['skipped'])} skipped."]
md += [f"- failed: {n}" for n in tests["failed_names"][:30]]
md += [f"- skipped: {t['name']}" + (f": {t['why']}" if t["why"] else "") for t in tests["skipped"][:10]]
md += [f"- skip reason: {r}" for r in tests["skip_reasons"][:5]]
md += ["", "## compute-sanitizer memcheck", "", f"kernel filter: {san['kernel_filter']}"]
for name, b in san["binaries"].items():
    md.append(f"- {name}: {num(b['errors'], '{}')} errors" + ("" if b["finished"] else " (did not finish)")
              + f", {num(b['tests'], '{}')} tests, {num(b['test_failures'], '{}')} test failures")
    md += [f"  - {l}" for l in b["first_errors"]]
md += ["", "## ResNet-20, one epoch of configs/resnet.yaml on the GPU", ""]
if summary:
    md += ["| images/s | train loss | train top-1 (last logged) | eval top-1 | eval loss | steps | wall s |",
           "|---|---|---|---|---|---|---|",
           f"| {num(r20['images_per_sec'])} | {num(r20['train_loss'], '{:.4f}')} | "
           f"{num(r20.get('train_top1_last_logged'), '{:.4f}')} | {num(r20['eval_top1'], '{:.4f}')} | "
           f"{num(r20['eval_loss'], '{:.4f}')} | {r20['steps']} | {num(r20['wall_time_s'])} |"]
    if r20.get("input_bound_verdict"):
        md += ["", f"Input: {r20['input_bound_verdict']}"]
else:
    md.append(f"no run summary: {r20.get('error', 'not run')}")
md += ["", f"## ResNet-50 training, 224x224, batch 256, NHWC, {E.get('r50_steps')} timed steps after "
       f"{E.get('r50_warmup')} warm-up", "",
       "| precision | Tandem images/s | PyTorch images/s | Tandem / PyTorch | Tandem step p50 / p95 ms | "
       "PyTorch step p50 / p95 ms | Tandem peak GiB | PyTorch peak GiB |", "|---|---|---|---|---|---|---|---|"]
for p in ("fp32", "tf32", "bf16"):
    a, b = r50["tandem"].get(p, {}), r50["pytorch"].get(p, {})
    sa, sb = a.get("step_ms", {}), b.get("step_ms", {})
    md.append(f"| {p} | {num(a.get('images_per_sec'))} | {num(b.get('images_per_sec'))} | "
              f"{num(r50['ratio_tandem_over_pytorch'][p], '{:.3f}')} | {num(sa.get('p50'))} / {num(sa.get('p95'))} | "
              f"{num(sb.get('p50'))} / {num(sb.get('p95'))} | {gib(a.get('peak_bytes_in_use'))} | "
              f"{gib(b.get('peak_bytes_allocated'))} |")
for p in ("fp32", "tf32", "bf16"):
    prof = r50["tandem"].get(p, {}).get("profile")
    if prof:
        md.append(kernel_split(f"Tandem {p}, per kernel", prof, 8))
for p in ("fp32", "tf32", "bf16"):
    for who in ("tandem", "pytorch"):
        if "error" in r50[who].get(p, {}):
            md.append(f"- {who} {p}: {r50[who][p]['error']}")
if "error" in r50["pytorch"]:
    md.append(f"- pytorch: {r50['pytorch']['error']}")
if r50["pytorch"]:
    first = next((d for d in r50["pytorch"].values() if isinstance(d, dict) and d.get("torch")), {})
    md += ["", f"PyTorch {first.get('torch', '?')}, cuDNN {first.get('cudnn', '?')}, model: {first.get('model_source', '?')}."]
if gpt2["tandem"] or gpt2["pytorch"] or gpt2["errors"]:
    md += ["", f"## GPT-2 124M training, batch 8 x 1024, AdamW ({E.get('gpt2_steps')} timed steps after "
           f"{E.get('gpt2_warmup')} warm-up); MFU at {fpt / 1e6:.0f} MFLOP per token against "
           + ", ".join(f"{v} TFLOPS {k}" for k, v in PEAK_TFLOPS.items()), "",
           "| engine | precision | tokens/s | MFU | step p50 ms | peak GiB | Tandem / this |", "|---|---|---|---|---|---|---|"]
    rows = [("Tandem", p, d) for p, d in gpt2["tandem"].items()]
    rows += [(f"PyTorch {a}", p, d) for a, per in gpt2["pytorch"].items() for p, d in per.items()]
    for who, p, d in rows:
        ours = gpt2["tandem"].get(p, {}).get("tokens_per_sec")
        ratio = f"{ours / d['tokens_per_sec']:.3f}" if ours and who != "Tandem" else "-"
        md.append(f"| {who} | {p} | {d['tokens_per_sec']:.0f} | {d['mfu']:.1%} | {d['step_ms']['p50']:.1f} | "
                  f"{gib(d.get('peak_bytes_in_use') or d.get('peak_bytes_allocated'))} | {ratio} |")
    for p in ("fp32", "tf32", "bf16"):
        prof = gpt2["tandem"].get(p, {}).get("profile")
        if prof:
            md.append(kernel_split(f"Tandem {p}, per kernel-table entry", prof, 10))
        prof = gpt2["pytorch"].get("sdpa", {}).get(p, {}).get("profile")
        if prof:
            top = list(prof.get("kernels_ms", {}).items())[:10]
            md.append(f"- PyTorch SDPA {p}, per CUDA kernel (torch.profiler, {prof['device_ms']:.1f} ms of device time "
                      f"per step): " + ", ".join(f"{name[:60]} {ms:.1f} ms ({calls})" for name, (ms, calls) in top))
    md += [f"- {e}" for e in gpt2["errors"]]
    md += ["", "Tandem's peak is its allocator's over the whole process (the three precisions run in one)."]
if attention or ("attention" in step and step["attention"]["status"] != "skipped"):
    md += ["", "## Attention alone: forward + backward, B 8, 12 heads, D 64, causal, bf16", ""]
    if not attention:
        md.append(f"not measured: {last_lines(f'{logs}/attention.log') or 'no output'}")
    else:
        md += ["| layout | T | Tandem ms p50 | PyTorch SDPA ms p50 | Tandem / PyTorch (speed) | Tandem MiB beyond inputs | PyTorch MiB beyond inputs |",
               "|---|---|---|---|---|---|---|"]
    for d in attention:
        if d.get("engine") != "tandem":
            continue
        ref = next((r for r in attention if r.get("engine") == "pytorch_sdpa" and r.get("layout") == d.get("layout")
                    and r.get("seq_len") == d.get("seq_len")), {})
        ratio = f"{ref['ms_p50'] / d['ms_p50']:.3f}" if ref.get("ms_p50") and d.get("ms_p50") else "-"
        md.append(f"| {d.get('layout')} | {d.get('seq_len')} | {d.get('ms_p50')} | {ref.get('ms_p50', '-')} | {ratio} | "
                  f"{num((d.get('allocator_peak_extra_bytes') or 0) / 2**20)} | "
                  f"{num((ref.get('allocator_peak_extra_bytes') or 0) / 2**20)} |")
md += ["", "## ONNX: ResNet-50 exported, batch 32, 224x224, Tandem's GPU eval forward beside onnxruntime (CUDA)", ""]
if onnx.get("onnxruntime", {}).get("error") or not onnx:
    md.append(f"not compared: {onnx.get('onnxruntime', {}).get('error') or last_lines(f'{logs}/onnx_r50.log') or 'not run'}")
else:
    t, o = onnx.get("tandem", {}), onnx.get("onnxruntime", {})
    md.append(f"export {num(t.get('export_s'), '{:.2f}')} s, {num((t.get('onnx_bytes') or 0) / 1e6)} MB; Tandem "
              f"{num(t.get('tandem_images_per_s'))} images/s, onnxruntime {o.get('onnxruntime', '?')} "
              f"{num(o.get('ort_images_per_s'))} images/s (Tandem / onnxruntime "
              f"{num(onnx.get('ratio_tandem_over_onnxruntime'), '{:.3f}')}); largest logit difference "
              f"{num(o.get('max_abs_difference'), '{:.2e}')} of {num(o.get('max_abs_logit'), '{:.2f}')} "
              f"(tolerance {o.get('tolerance', '?')} relative)")
tb = report["tensorboard"].get("tensorboard_runs")
md += ["", "## TensorBoard's reader on the ResNet-20 run", ""]
md += [f"- {run or '.'}: " + ", ".join(f"{tag} ({n})" for tag, n in sorted(tags.items())) for run, tags in (tb or {}).items()]
if not tb:
    md.append(f"not read: {last_lines(f'{logs}/tensorboard.log') or 'not run'}")
doctor = report["doctor"] or {}
md += ["", "## trainer doctor", "", f"{doctor.get('verdict', 'no report')}"]
md += [f"- {c.get('severity')}: {c.get('summary')} (fix: {c.get('fix')})" for c in doctor.get("causes", [])]
md += ["", "## Libraries", "", "| library | from |", "|---|---|"]
md += [f"| {k} | {v or 'NOT FOUND'} |" for k, v in report["libraries"].items()]
md += ["", "Logs: gpu_check_logs.tar.gz (logs/<step>.log, steps.tsv, nvidia-smi, doctor.json, the ResNet-20 run summary)."]
with open(f"{out}/gpu_check.md", "w") as f:
    f.write("\n".join(md) + "\n")
raise SystemExit({"ok": 0, "no_gpu": 2}.get(status, 1))
