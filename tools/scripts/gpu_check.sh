#!/usr/bin/env bash
# The one-call GPU check (docs/GPU_CHECK.md), run on the lent H200 machine in one device call, over
# the archive tools/scripts/gpu_pack.sh made here (.gpu/tandem-gpu.tar.xz, carried as ".gpu"):
#   unpack; find the CUDA, cuDNN, cuBLAS and NCCL libraries (the pip `nvidia` packages, then the
#   CUDA install) and the driver, set LD_LIBRARY_PATH, check with ldd that every binary loads; then
#   nvidia_smi       record nvidia-smi (and sample the device memory in use every 0.5 s throughout)
#   doctor           trainer doctor --json --device cuda
#   gpu_tests        ctest -L gpu over the carried ctest files (else each test_*_gpu binary, gtest JSON)
#   resnet20         one epoch of configs/resnet.yaml (ResNet-20, Fashion-MNIST) with device: cuda
#   r50_tandem_*     bench/gpu_train_bench: ResNet-50, 224x224, batch 256, NHWC; fp32, tf32, bf16
#   r50_pytorch      bench/pytorch_resnet50.py: the same in PyTorch on the same GPU
#   gpt2_tandem      bench/gpu_train_bench --model gpt2: GPT-2 124M, batch 8 x 1024, AdamW; fp32, tf32, bf16
#   gpt2_pytorch     bench/pytorch_gpt2.py: the same in PyTorch, eager attention and F.scaled_dot_product_attention
#   attention        bench/attention_bench --device cuda: attention forward + backward alone, B 8, 12 heads,
#                    D 64, causal, T 1024 and 4096, bf16, on GPT's packed projection and on (B, H, T, D),
#                    beside F.scaled_dot_product_attention (bench/pytorch_attention_gpu.py)
#   onnx_r50         bench/onnx_bench: ResNet-50 exported to ONNX, its logits on the GPU beside those of
#                    onnxruntime's CUDA execution provider on the exported file (bench/onnx_ort_bench.py)
#   tensorboard      the ResNet-20 run's event files read by TensorBoard's own reader: scalar tags, counts
#   sanitizer        the kernel tests (test_cuda_gpu) again under compute-sanitizer memcheck
# and writes gpu_check.json, gpu_check.md and gpu_check_logs.tar.gz to the output folder. Every step
# is time-boxed with `timeout` inside one overall budget (a step gets at most its own limit, and never
# time that the later steps' minimums need); a failed or timed-out step is recorded and the next runs.
#
# usage: bash tools/scripts/gpu_check.sh [--out DIR] [--archive FILE] [--budget SECONDS] [--skip a,b]
#   --out DIR      where the reports go (default: $OUT on the device machine, else build-gpu/gpu-check-out)
#   --archive F    the pack (default .gpu/tandem-gpu.tar.xz)
#   --budget S     overall wall-clock budget, unpacking and reports included (default 420: 7 minutes)
#   --skip LIST    steps to leave out, by the names above (for a short rerun of the rest)
# Environment: GPU_CHECK_R50_STEPS (20), GPU_CHECK_R50_WARMUP (5), GPU_CHECK_GPT2_STEPS (5),
#   GPU_CHECK_GPT2_WARMUP (2), GPU_CHECK_GPT2_PROFILE_STEPS (2: per-kernel splits of both engines' GPT
#   steps, Tandem's fenced per kernel-table entry, PyTorch's from torch.profiler), GPU_CHECK_CTEST_JOBS (8),
#   GPU_CHECK_CUDA_FROM (pip: the pip nvidia packages first; toolkit: /usr/local/cuda first),
#   GPU_CHECK_SANITIZE_ALL=1 (memcheck every kernel, cuDNN's and cuBLAS's too: much slower),
#   GPU_CHECK_SANITIZE_TESTS (test_cuda_gpu), GPU_CHECK_SANITIZE_GROUPS (gtest filters, one sanitizer
#   run each, space-separated; NCCL's tests are in none), GPU_CHECK_RERUN_BLOCKING=0 (no rerun of the
#   failed gpu tests with CUDA_LAUNCH_BLOCKING=1 and CUDA_MODULE_LOADING=EAGER),
#   GPU_CHECK_WORK (scratch folder, default /tmp/tandem-gpu-check), GPU_CHECK_IGNORE_NO_GPU=1 (run
#   the GPU steps even without a GPU, to test their wiring: they fail or skip quickly).
# Exit 0: every step passed; 1: something needs attention (the reports say what); 2: no GPU here
# (it stops at the first GPU step and says why, after unpacking and finding the libraries).
set -uo pipefail  # no -e: a failing step is a finding, recorded, and the check goes on

self=$(readlink -f "$0")
root=$(cd "$(dirname "$self")/../.." && pwd)
say() { echo "[gpu_check $(($(date +%s) - ${t0:-$(date +%s)}))s] $*"; }

# ---- steps that run under `timeout` (this script runs itself: bash "$self" __step NAME) ----------
step_nvidia_smi() {
  nvidia-smi && nvidia-smi -q >"$logs/nvidia_smi_q.txt" &&
    nvidia-smi --format=csv >"$logs/nvidia_smi.csv" \
      --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,pstate ||
    return 1
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader >"$logs/nvidia_smi_cc.txt" 2>/dev/null
  cat "$logs/nvidia_smi.csv"
}

step_doctor() { "$pk/tools/trainer" doctor --json --device cuda >"$logs/doctor.json"; }

step_gpu_tests() {
  # The carried ctest files name this build's paths as placeholders: fill in where the pack is now.
  for f in "$pk"/ctest/CTestTestfile.cmake "$pk"/ctest/tests/*.cmake; do
    local dest=$pk/${f#"$pk"/ctest/}
    mkdir -p "$(dirname "$dest")"
    sed -e "s#@PACK_ROOT@#$pk#g" -e "s#@SOURCE_ROOT@#$root#g" "$f" >"$dest"
  done
  local n=0
  if command -v ctest >/dev/null; then
    n=$(ctest --test-dir "$pk" -N -L gpu 2>&1 | sed -n 's/^Total Tests: //p')
  fi
  if [[ ${n:-0} -gt 0 ]] && ctest --help 2>&1 | grep -c -- --output-junit >/dev/null; then
    # --stop-time: ctest ends every test before this step's own limit, so it still writes its
    # JUnit file when a slow test would have taken the whole step down with it.
    local stop
    stop=$(date -d "@$((step_deadline - 10))" +%H:%M:%S)
    echo "runner: ctest ($n tests labelled gpu, $ctest_jobs at a time, all stopped by $stop)"
    ctest --test-dir "$pk" -L gpu -j "$ctest_jobs" --timeout 120 --stop-time "$stop" --output-on-failure \
      --no-tests=error --output-junit "$logs/ctest_junit.xml"
    local rc=$?
    # A kernel fault surfaces at the next checked call, which may name the wrong one: the failed tests
    # again with every launch synchronous and every module loaded at start name the right call.
    if ((rc != 0)) && [[ ${GPU_CHECK_RERUN_BLOCKING:-1} == 1 ]] && ((step_deadline - $(date +%s) > 20)); then
      stop=$(date -d "@$((step_deadline - 5))" +%H:%M:%S)
      echo "rerun of the failed tests with CUDA_LAUNCH_BLOCKING=1 CUDA_MODULE_LOADING=EAGER NCCL_DEBUG=WARN:" \
        "logs/gpu_tests_blocking.log"
      CUDA_LAUNCH_BLOCKING=1 CUDA_MODULE_LOADING=EAGER NCCL_DEBUG=${NCCL_DEBUG:-WARN} ctest --test-dir "$pk" --rerun-failed -j "$ctest_jobs" \
        --timeout 60 --stop-time "$stop" --output-on-failure >"$logs/gpu_tests_blocking.log" 2>&1
      grep -E "tests passed|^\s*[0-9]+ - " "$logs/gpu_tests_blocking.log" | head -40
    fi
    return $rc
  fi
  echo "runner: gtest (ctest $(command -v ctest >/dev/null && echo "lists $n gpu tests here, or has no --output-junit" || echo "is not installed"))"
  local rc=0 bin
  for bin in "$pk"/tests/test_*_gpu; do
    [[ -x $bin ]] || continue
    "$bin" --gtest_output="json:$logs/gtest_$(basename "$bin").json" || rc=1
  done
  return $rc
}

step_resnet20() {
  cd "$work" || return 1
  local data=$pk/data/fashion-mnist
  "$pk/tools/trainer" --config "$root/configs/resnet.yaml" --run-dir "$work/runs/resnet20" \
    --set device=cuda --set train.epochs=1 --set prepare.source=none \
    --set "data.files=$data/train-*.tfrecord" --set "eval_data.files=$data/test-*.tfrecord"
}

step_r50_tandem() {  # precision
  [[ -x $pk/bench/gpu_train_bench ]] || { echo "gpu_train_bench is not in the pack (see MANIFEST)"; return 3; }
  # --profile: a few more steps with every kernel fenced, for the per-kernel split; the debug level
  # logs each convolution's cuDNN algorithm.
  SPDLOG_LEVEL=${GPU_CHECK_R50_LOG_LEVEL:-debug} "$pk/bench/gpu_train_bench" --precision "$1" --batch 256 \
    --steps "$r50_steps" --warmup "$r50_warmup" --profile "${GPU_CHECK_R50_PROFILE_STEPS:-3}" --json
}

step_r50_pytorch() {
  # The system's own library path: ours (Debian's zlib, libpng...) must not shadow what Python loads.
  LD_LIBRARY_PATH=$orig_ld PYTHONUNBUFFERED=1 python3 "$root/bench/pytorch_resnet50.py" --precision fp32,tf32,bf16 \
    --batch 256 --steps "$r50_steps" --warmup "$r50_warmup"
}

step_gpt2_tandem() {
  [[ -x $pk/bench/gpu_train_bench ]] || { echo "gpu_train_bench is not in the pack (see MANIFEST)"; return 3; }
  "$pk/bench/gpu_train_bench" --model gpt2 --precision fp32,tf32,bf16 --batch 8 --steps "$gpt2_steps" \
    --warmup "$gpt2_warmup" --profile "${GPU_CHECK_GPT2_PROFILE_STEPS:-2}" --json
}

step_gpt2_pytorch() {
  LD_LIBRARY_PATH=$orig_ld PYTHONUNBUFFERED=1 python3 "$root/bench/pytorch_gpt2.py" --attention eager,sdpa \
    --precision fp32,tf32,bf16 --batch 8 --steps "$gpt2_steps" --warmup "$gpt2_warmup" \
    --profile "${GPU_CHECK_GPT2_PROFILE_STEPS:-2}"
}

step_attention() {
  [[ -x $pk/bench/attention_bench ]] || { echo "attention_bench is not in the pack (see MANIFEST)"; return 3; }
  local rc=0 t layout
  for t in 1024 4096; do
    for layout in packed heads; do
      local args=(--seq-len "$t" --batch 8 --heads 12 --head-dim 64 --causal 1 --precision bf16 --layout "$layout")
      "$pk/bench/attention_bench" --device cuda --reps 10 --warmup 3 "${args[@]}" || rc=1
      LD_LIBRARY_PATH=$orig_ld python3 "$root/bench/pytorch_attention_gpu.py" --reps 10 --warmup 3 "${args[@]}" || rc=1
    done
  done
  return $rc
}

step_onnx_r50() {
  [[ -x $pk/bench/onnx_bench ]] || { echo "onnx_bench is not in the pack (see MANIFEST)"; return 3; }
  local dir=$work/onnx_r50
  "$pk/bench/onnx_bench" --out "$dir" --model resnet50 --batch 32 --input-size 224 --device cuda --iters 20 --warmup 3 ||
    return $?
  # onnxruntime is the image's Python package: the system's library path, not ours.
  LD_LIBRARY_PATH=$orig_ld python3 "$root/bench/onnx_ort_bench.py" "$dir" 32 224 --iters 20 --warmup 3 --provider cuda
}

step_tensorboard() {
  local run=$work/runs/resnet20
  compgen -G "$run/**/events.out.tfevents.*" >/dev/null || compgen -G "$run/events.out.tfevents.*" >/dev/null ||
    { echo "no TensorBoard event files under $run (the resnet20 step writes them)"; return 3; }
  LD_LIBRARY_PATH=$orig_ld python3 - "$run" <<'PY'
import json, sys
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
mux = EventMultiplexer().AddRunsFromDirectory(sys.argv[1])
mux.Reload()
runs = {}
for run, tags in mux.Runs().items():
    runs[run] = {tag: len(mux.Scalars(run, tag)) for tag in tags.get("scalars", [])}
print(json.dumps({"tensorboard_runs": runs}))
sys.exit(0 if any(runs.values()) else 1)
PY
}

step_sanitizer() {
  local cs c
  cs=$(command -v compute-sanitizer)
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [[ -z $cs && -x $c ]] && cs=$c
  done
  [[ -n $cs ]] || { echo "compute-sanitizer not found"; return 3; }
  # Only our kernels (all in namespace tandem) are instrumented: cuDNN's and cuBLAS's under memcheck
  # would take the whole budget. GPU_CHECK_SANITIZE_ALL=1 checks every kernel.
  local filter=()
  if [[ ${GPU_CHECK_SANITIZE_ALL:-0} != 1 ]] && "$cs" --help 2>&1 | grep -c -- '--kernel-name ' >/dev/null; then
    filter=(--kernel-name kns=tandem)
  fi
  # The kernel tests run in groups, one sanitizer process each, so that a group cut off by the
  # step's limit still leaves the earlier groups' summaries (a single run reports only at its end).
  # NCCL's collectives (proxy threads, host-mapped memory) are slow under memcheck and not our kernels.
  local groups=${GPU_CHECK_SANITIZE_GROUPS:-"CudaElementwise*:CudaSum*:CudaDropout*:CudaSoftmax*:CudaClassification* TensorOpsGpuTest* *Pool*:BatchNorm*:OptimizerGpu*:MatmulGpu*:LinearGpu* CudaConv*:CudaDevice*"}
  # Failed API calls made inside cuDNN and cuBLAS (their own probing) are not faults: only invalid
  # accesses in our kernels count.
  local base=("$cs" --tool memcheck --report-api-errors no --error-exitcode 99 --print-limit 30)
  local rc=0 name group g
  for name in ${GPU_CHECK_SANITIZE_TESTS:-test_cuda_gpu}; do
    [[ -x $pk/tests/$name ]] || { echo "$name is not in the pack"; rc=3; continue; }
    g=0
    for group in $groups; do
      g=$((g + 1))
      local log=$logs/sanitizer_${name}_g$g.log
      local tests=(--gtest_brief=1 --gtest_filter="$group" --gtest_output="json:$logs/sanitizer_${name}_g$g.json")
      local cmd=("${base[@]}" "${filter[@]}" "$pk/tests/$name" "${tests[@]}")
      echo "${cmd[*]}"
      "${cmd[@]}" >"$log" 2>&1
      local r=$?
      if ((r != 0 && ${#filter[@]} > 0)) && ! grep -q "ERROR SUMMARY" "$log"; then
        echo "the kernel filter was refused; again without it"
        filter=()
        cmd=("${base[@]}" "$pk/tests/$name" "${tests[@]}")
        "${cmd[@]}" >"$log" 2>&1
        r=$?
      fi
      grep -m 40 -E "ERROR SUMMARY|Invalid|FAILED|PASSED" "$log"
      ((r == 0)) || rc=$r
    done
  done
  return $rc
}

# ---- the reports: tools/scripts/gpu_check_report.py writes gpu_check.json and gpu_check.md -------

if [[ ${1:-} == __step ]]; then
  name=$2
  shift 2
  "step_$name" "$@"
  exit $?
fi

# ---- the driver ---------------------------------------------------------------------------------
t0=$(date +%s)
out_dir=${OUT:-$root/build-gpu/gpu-check-out}
archive=$root/.gpu/tandem-gpu.tar.xz
budget=420 skip=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out_dir=$2; shift 2 ;;
    --archive) archive=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$self" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
work=${GPU_CHECK_WORK:-/tmp/tandem-gpu-check}
pk=$work/pack logs=$work/logs
deadline=$((t0 + budget))
report_reserve=20  # seconds kept for the reports and the log archive
export root work pk logs
export r50_steps=${GPU_CHECK_R50_STEPS:-20} r50_warmup=${GPU_CHECK_R50_WARMUP:-5} ctest_jobs=${GPU_CHECK_CTEST_JOBS:-8}
export gpt2_steps=${GPU_CHECK_GPT2_STEPS:-5} gpt2_warmup=${GPU_CHECK_GPT2_WARMUP:-2}
export orig_ld=${LD_LIBRARY_PATH:-}
case $work in /|"$root"|"$HOME"|"") echo "gpu_check: GPU_CHECK_WORK=$work would be wiped: choose a scratch folder" >&2; exit 1 ;; esac
rm -rf "$work" && mkdir -p "$pk" "$logs" "$out_dir" || { echo "gpu_check: cannot create $work or $out_dir" >&2; exit 1; }
steps_tsv=$logs/steps.tsv
: >"$steps_tsv"

# Order, limit and minimum of each step: a step never takes time that later steps' minimums need.
order=(nvidia_smi doctor gpu_tests resnet20 tensorboard r50_tandem_fp32 r50_tandem_tf32 r50_tandem_bf16 r50_pytorch
       onnx_r50 gpt2_tandem gpt2_pytorch attention sanitizer)
declare -A cap=([nvidia_smi]=20 [doctor]=40 [gpu_tests]=120 [resnet20]=100 [tensorboard]=30 [r50_tandem_fp32]=70
                [r50_tandem_tf32]=60 [r50_tandem_bf16]=60 [r50_pytorch]=120 [onnx_r50]=60 [gpt2_tandem]=90
                [gpt2_pytorch]=90 [attention]=60 [sanitizer]=120)
# The minimums are what each step took on the H200 (2026-12-04) with some room: ResNet-20's epoch
# 6 s, a ResNet-50 precision 28-42 s at 20 steps.
# tensorboard, onnx_r50 and attention have not run on a GPU machine yet: their minimums are guesses.
declare -A floor=([nvidia_smi]=5 [doctor]=10 [gpu_tests]=40 [resnet20]=20 [tensorboard]=5 [r50_tandem_fp32]=25
                  [r50_tandem_tf32]=25 [r50_tandem_bf16]=25 [r50_pytorch]=60 [onnx_r50]=20 [gpt2_tandem]=30
                  [gpt2_pytorch]=40 [attention]=15 [sanitizer]=0)

# A step left out (--skip) reserves no time.
for s in "${order[@]}"; do [[ ,$skip, == *,$s,* ]] && floor[$s]=0; done
# A budget below the minimums' sum shrinks every minimum alike, so the first steps are not the ones
# left out.
floor_sum=0
for s in "${order[@]}"; do floor_sum=$((floor_sum + floor[$s])); done
if ((floor_sum > budget - report_reserve - 15)); then
  for s in "${order[@]}"; do floor[$s]=$((floor[$s] * (budget - report_reserve - 15) / floor_sum)); done
fi

record() {  # name status rc seconds limit start end note
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$steps_tsv"
}

run_step() {  # name [args for step_<function>]; the function is the name up to a precision suffix
  local name=$1 fn=$1
  shift
  [[ $name == r50_tandem_* ]] && fn=r50_tandem
  local now
  now=$(date +%s)
  if [[ ,$skip, == *,$name,* ]]; then
    record "$name" skipped "" 0 0 "$now" "$now" "--skip"
    return 0
  fi
  local later=0 seen=0 s
  for s in "${order[@]}"; do
    ((seen)) && later=$((later + floor[$s]))
    [[ $s == "$name" ]] && seen=1
  done
  local limit=${cap[$name]} left=$((deadline - now - report_reserve - later))
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    say "$name: skipped, out of time"
    record "$name" skipped "" 0 "$limit" "$now" "$now" "out of time"
    return 0
  fi
  say "$name (limit ${limit}s)"
  local start end rc status
  start=$(date +%s.%N)
  step_deadline=$((now + limit)) timeout -k 10 "$limit" bash "$self" __step "$fn" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  case $rc in
    0) status=ok ;;
    124|137) status=timeout ;;
    3) status=unavailable ;;
    *) status=failed ;;
  esac
  local secs
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')
  record "$name" "$status" "$rc" "$secs" "$limit" "$start" "$end" ""
  say "$name: $status (exit $rc) in ${secs}s; log $name.log"
  [[ $status == ok ]] || tail -5 "$logs/$name.log" | sed 's/^/    /'
  write_reports ran partial >/dev/null 2>&1
}

write_reports() {  # status-hint (no_gpu / not_packed / ran) [partial]
  local partial=${2:-}
  [[ -z $partial && -n ${sampler:-} ]] && kill "$sampler" 2>/dev/null
  GPU_CHECK_HINT=$1 GPU_CHECK_WALL=$(($(date +%s) - t0)) GPU_CHECK_BUDGET=$budget GPU_CHECK_OUT=$out_dir \
    GPU_CHECK_REASON=${no_gpu_reason:-} python3 "$root/tools/scripts/gpu_check_report.py"
  local rc=$?
  # Logs, the ResNet-20 run's summary and metrics: one file (the device call returns 8 files at most).
  cp "$work/runs/resnet20/run_summary.json" "$logs/resnet20_run_summary.json" 2>/dev/null
  cp "$work/runs/resnet20/metrics.csv" "$logs/resnet20_metrics.csv" 2>/dev/null
  cp "$pk/MANIFEST" "$logs/MANIFEST" 2>/dev/null
  find "$logs" -type f -size +4M -exec sh -c 'tail -c 4M "$1" >"$1.tail" && mv "$1.tail" "$1"' _ {} \;
  tar -C "$work" -czf "$out_dir/gpu_check_logs.tar.gz.tmp" logs && mv "$out_dir/gpu_check_logs.tar.gz.tmp" "$out_dir/gpu_check_logs.tar.gz"
  # After each step the reports are rewritten, so a call cut off at its limit still brings them back.
  [[ -n $partial ]] && return $rc
  cat "$out_dir/gpu_check.md" 2>/dev/null
  say "reports in $out_dir: gpu_check.json, gpu_check.md, gpu_check_logs.tar.gz"
  return $rc
}

# ---- unpack -------------------------------------------------------------------------------------
if [[ ! -f $archive ]]; then
  no_gpu_reason="no pack at $archive: run tools/scripts/gpu_pack.sh here first, and carry .gpu"
  say "$no_gpu_reason"
  write_reports not_packed
  exit 1
fi
say "unpacking $archive ($(du -h "$archive" | cut -f1)) into $pk"
if command -v xz >/dev/null; then
  xz -dc -T0 "$archive" | tar -C "$pk" -xf -
else  # a bare image without xz-utils: Python's tarfile reads xz too
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$archive" "$pk"
fi || { no_gpu_reason="cannot unpack $archive"; write_reports not_packed; exit 1; }
sed 's/^/    /' "$pk/MANIFEST"

# ---- libraries: the CUDA stack of this machine, our Debian libraries from the pack --------------
site_dirs=$(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
pip_dirs=() toolkit_dirs=()
for sp in $site_dirs; do
  for d in "$sp"/nvidia/cu13/lib "$sp"/nvidia/*/lib; do [[ -d $d ]] && pip_dirs+=("$d"); done
done
for d in "${CUDA_HOME:-/usr/local/cuda}"/lib64 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
  [[ -d $d ]] && toolkit_dirs+=("$d")
done
if [[ ${GPU_CHECK_CUDA_FROM:-pip} == toolkit ]]; then search=("${toolkit_dirs[@]}" "${pip_dirs[@]}")
else search=("${pip_dirs[@]}" "${toolkit_dirs[@]}"); fi
cuda_ld=""
: >"$logs/libraries.tsv"
while read -r soname; do
  [[ -n $soname ]] || continue
  found=""
  for d in "${search[@]}"; do [[ -e $d/$soname ]] && { found=$d; break; }; done
  printf '%s\t%s\n' "$soname" "${found:+$found/$soname}" >>"$logs/libraries.tsv"
  [[ -n $found && :$cuda_ld: != *:$found:* ]] && cuda_ld=${cuda_ld:+$cuda_ld:}$found
done <"$pk/cuda_needed.txt"
# The driver's libcuda.so.1: normally on the loader's path already; else in the driver's folder.
driver_dir=""
if ! ldconfig -p 2>/dev/null | grep -c 'libcuda\.so\.1 ' >/dev/null; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [[ -e $d/libcuda.so.1 ]] && { driver_dir=$d; break; }
  done
fi
printf 'libcuda.so.1\t%s\n' "$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" && !seen++ {print $NF}')${driver_dir:+$driver_dir/libcuda.so.1}" >>"$logs/libraries.tsv"
ours=$pk/lib:$pk/engine/core
export LD_LIBRARY_PATH=$ours${cuda_ld:+:$cuda_ld}${driver_dir:+:$driver_dir}${orig_ld:+:$orig_ld}
# Every binary's libraries resolve; the plugin's symbols too (a cuBLAS or cuDNN older than the
# build's headers shows here as an undefined symbol, before any step fails on it).
ldd_check() {
  find "$pk" -type f \( -perm -u+x -o -name '*.so*' \) -not -path "$pk/data/*" -not -path "$pk/lib/fallback/*" \
    -exec sh -c 'for f; do ldd "$f" 2>&1 | grep -E "not found" | sed "s#^#${f#$0/}: #"; done' "$pk" {} +
  local plugin=$pk/engine/backend/cuda/libtandem_cuda.so
  [[ -f $plugin ]] && ldd -r "$plugin" 2>&1 | grep "undefined symbol" | sed "s#^#engine/backend/cuda/libtandem_cuda.so: #"
}
ldd_check >"$logs/ldd_problems.txt"
if grep -qE "GLIBCXX|CXXABI|GCC_" "$logs/ldd_problems.txt"; then
  say "this machine's libstdc++ is older than the build's: using the pack's (lib/fallback)"
  export LD_LIBRARY_PATH=$ours:$pk/lib/fallback${cuda_ld:+:$cuda_ld}${driver_dir:+:$driver_dir}${orig_ld:+:$orig_ld}
  ldd_check >"$logs/ldd_problems.txt"
fi
echo "$LD_LIBRARY_PATH" >"$logs/ld_library_path.txt"
say "libraries:" && sed 's/^/    /' "$logs/libraries.tsv"
[[ -s $logs/ldd_problems.txt ]] && say "ldd finds problems:" && sed -n '1,20s/^/    /p' "$logs/ldd_problems.txt"

# ---- the first GPU step: is there a GPU at all? -------------------------------------------------
no_gpu_reason=""
if ! command -v nvidia-smi >/dev/null; then
  no_gpu_reason="nvidia-smi is not installed$([[ -e /dev/nvidia0 ]] || echo " and there is no /dev/nvidia0"): this is not a GPU machine"
elif ! nvidia-smi -L >"$logs/nvidia_smi_L.txt" 2>&1 || ! grep -q '^GPU ' "$logs/nvidia_smi_L.txt"; then
  no_gpu_reason="nvidia-smi lists no GPU: $(head -c 300 "$logs/nvidia_smi_L.txt" | tr '\n' ' ')"
fi
if [[ -n $no_gpu_reason && ${GPU_CHECK_IGNORE_NO_GPU:-0} == 1 ]]; then
  # Testing the steps' wiring on a machine without a GPU: each GPU step then fails or skips quickly.
  say "no GPU ($no_gpu_reason), but GPU_CHECK_IGNORE_NO_GPU=1: running the steps anyway"
  no_gpu_reason=""
fi
if [[ -n $no_gpu_reason ]]; then
  say "STOP before the first GPU step: $no_gpu_reason"
  write_reports no_gpu
  say "no GPU here: exit 2 (everything before the GPU steps ran: unpacking, libraries, ldd)"
  exit 2
fi
[[ -f $logs/nvidia_smi_L.txt ]] && sed 's/^/    /' "$logs/nvidia_smi_L.txt"
# Device memory in use, every 0.5 s, for the whole check: the report takes each step's peak from it.
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 500 >"$logs/gpu_memory.csv" 2>&1 &
sampler=$!
trap '[[ -n ${sampler:-} ]] && kill "$sampler" 2>/dev/null' EXIT

run_step nvidia_smi
run_step doctor
run_step gpu_tests
run_step resnet20
run_step tensorboard
run_step r50_tandem_fp32 fp32
run_step r50_tandem_tf32 tf32
run_step r50_tandem_bf16 bf16
run_step r50_pytorch
run_step onnx_r50
run_step gpt2_tandem
run_step gpt2_pytorch
run_step attention
run_step sanitizer
write_reports ran
exit $?
