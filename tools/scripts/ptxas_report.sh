#!/usr/bin/env bash
# ptxas's resource report (registers, spills, shared memory per kernel and architecture) for CUDA
# sources of the plugin, compiled again with the build's own flags plus -Xptxas -v; no GPU needed.
#   usage: tools/scripts/ptxas_report.sh [BUILD_DIR] [FILE.cu ...]
#   default: build, the attention kernels (cuda_flash_bf16_*.cu and cuda_attention.cu)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
files=("$@")
((${#files[@]})) || files=(engine/backend/cuda/cuda_flash_bf16_forward.cu engine/backend/cuda/cuda_flash_bf16_backward.cu
                         engine/backend/cuda/cuda_attention.cu)
[[ -f $build/compile_commands.json ]] || { echo "ptxas_report: no $build/compile_commands.json: configure first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in "${files[@]}"; do
  cmd=$(python3 - "$build/compile_commands.json" "$PWD/$f" "$out/x.o" <<'EOF'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]:
        args = shlex.split(e["command"])
        i = args.index("-o")
        args[i + 1] = sys.argv[3]
        print(shlex.join(args + ["-Xptxas=-v"]))
        break
EOF
)
  [[ -n $cmd ]] || { echo "ptxas_report: $f is not in $build/compile_commands.json" >&2; exit 1; }
  echo "== $f"
  (cd "$build" && eval "$cmd") 2>&1 | python3 -c '
import re, sys
kernel, arch = "?", "?"
for line in sys.stdin:
    m = re.search(r"Compiling entry function .(\S+). for .(sm_\d+)", line)
    if m:
        name = m.group(1)
        kernel = name[:60]
        for d in re.finditer(r"\d+", name):  # an Itanium-mangled name: its length, then the name
          for cut in range(d.start(), d.end()):  # hash digits may run into the length
            n, start = int(name[cut:d.end()]), d.end()
            if name[start:start + n].endswith("_kernel"):
                arg = re.match(r"ILi(\d+)E", name[start + n:])
                kernel = name[start:start + n] + (f"<{arg.group(1)}>" if arg else "")
                break
        arch = m.group(2)
        continue
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m:
        spills = f"spills {m.group(1)}/{m.group(2)} B"
        continue
    m = re.search(r"Used (\d+) registers(.*)", line)
    if m:
        smem = re.search(r"(\d+) bytes smem", m.group(2))
        print(f"  {arch:6} {kernel:34} {m.group(1):>3} registers  {spills:22} static smem {smem.group(1) if smem else 0} B")
'
done
