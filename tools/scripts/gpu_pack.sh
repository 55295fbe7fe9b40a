#!/usr/bin/env bash
# Prepares, on this machine (no GPU needed), what tools/scripts/gpu_check.sh runs on a lent GPU
# machine, which has CUDA, cuDNN, cuBLAS, NCCL and PyTorch but none of our Debian libraries and no
# network (docs/GPU_CHECK.md):
#   1. builds only what the check runs (libtandem_cuda.so, trainer, gpu_train_bench, onnx_bench, attention_bench and every
#      test_*_gpu executable) in the README test command's tree, build/, when it has the CUDA plugin,
#      sm_90 (H100/H200) code, the tests and the benches (its default): an incremental build of the
#      working tree, minutes after the test command. Otherwise it configures a Release tree for sm_90
#      in build-gpu/ (about 20 minutes from scratch on 2 cores);
#   2. makes the Fashion-MNIST TFRecords of the default run (configs/resnet.yaml's prepare step,
#      through `trainer convert`) from Debian's dataset-fashion-mnist;
#   3. stages the binaries in the build tree's layout (so the plugin loader finds the plugin next to
#      them), the shared libraries they need that the GPU machine lacks (walked with ldd; glibc,
#      libstdc++, libgcc and the CUDA/cuDNN/cuBLAS/NCCL libraries stay behind: they are there),
#      the ctest files of the gpu tests with their paths made relocatable, and a manifest; strips
#      them and writes ONE archive: .gpu/tandem-gpu.tar.xz (.gpu/ is git-ignored);
#   4. prints the archive's size and what the device call would send (64 MiB at most).
#
# usage: tools/scripts/gpu_pack.sh [--jobs N] [--no-build] [--allow-missing] [--shards N]
#   --jobs N         parallel compile jobs (default: all cores; run under nice)
#   --no-build       package what build-gpu/ already holds
#   --allow-missing  package even when some targets did not build (a dry run while kernels are
#                    still being written); the manifest and gpu_check's report name what is missing
#   --shards N       TFRecord shards per split (default 8: the 16-core GPU machine reads them in parallel)
# Environment: GPU_PACK_BUILD_DIR (default: build/ when it qualifies, else build-gpu), NICE (default 10).
# Exit 0: archive written; 1: a needed target did not build, or the archive is too large.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# The test command's tree serves when it was configured with what the check needs.
test_tree_qualifies() {
  local cache=$root/build/CMakeCache.txt
  [[ -f $root/build/build.ninja && -f $cache ]] &&
    grep -q '^TANDEM_WITH_CUDA:BOOL=ON' "$cache" && grep -q '^TANDEM_BUILD_TESTS:BOOL=ON' "$cache" &&
    grep -q '^TANDEM_BUILD_BENCH:BOOL=ON' "$cache" &&
    # The architectures are a plain variable (cmake/TandemDependencies.cmake), not in the cache: read
    # what nvcc is told to generate.
    grep -q 'arch=compute_90,code=\[compute_90,sm_90\]' "$root/build/build.ninja"
}
if [[ -n ${GPU_PACK_BUILD_DIR:-} ]]; then build=$GPU_PACK_BUILD_DIR
elif test_tree_qualifies; then build=$root/build
else build=$root/build-gpu; fi
stage=$build/gpu-pack            # build trees are git-ignored: the stage never travels by itself
archive=$root/.gpu/tandem-gpu.tar.xz
jobs=$(nproc) do_build=1 allow_missing=0 shards=8
idx_dir=/usr/share/datasets/fashion-mnist   # Debian's dataset-fashion-mnist

while [[ $# -gt 0 ]]; do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --allow-missing) allow_missing=1; shift ;;
    --shards) shards=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_pack: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "[gpu_pack] $*"; }
die() { echo "[gpu_pack] ERROR: $*" >&2; exit 1; }

# --- 1. configure and build ------------------------------------------------------------------
configure() {
  # Release, with host C++ at -O2 as in the RelWithDebInfo tree CI builds: GCC 12 at -O3 raises false
  # -Wrestrict errors in our -Werror build (seen in tests/distribute/distribute_test_util.cpp). The
  # device code is optimised by nvcc/ptxas either way.
  nice -n "${NICE:-10}" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DTANDEM_WITH_CUDA=ON -DTANDEM_BUILD_TESTS=ON -DTANDEM_BUILD_BENCH=ON \
    >"$build/gpu-pack-configure.log" 2>&1 || { tail -30 "$build/gpu-pack-configure.log" >&2; die "cmake configure failed (log: $build/gpu-pack-configure.log)"; }
  grep -q "building the CUDA plugin" "$build/gpu-pack-configure.log" ||
    die "cmake found no CUDA toolkit (set CUDA_HOME): nothing to check on a GPU (log: $build/gpu-pack-configure.log)"
}

# Targets the check runs: the plugin, the trainer, the ResNet-50 bench and the gpu test executables.
gpu_test_targets() { ninja -C "$build" -t targets all | sed -n 's/^\(test_[a-z0-9_]*_gpu\): .*/\1/p' | sort -u; }

mkdir -p "$build"
[[ -f $build/build.ninja ]] || do_build=1
if ((do_build)) && [[ $build == "$root/build" ]]; then
  say "reusing the test command's tree $build (it has the CUDA plugin with sm_90 code): building what changed"
elif ((do_build)); then
  say "configuring $build (Release, sm_90)"
  configure
fi
mapfile -t test_targets < <(gpu_test_targets)
targets=(tandem_cuda trainer gpu_train_bench onnx_bench attention_bench "${test_targets[@]}")
build_rc=0
if ((do_build)); then
  say "building ${targets[*]} with $jobs jobs (log: $build/gpu-pack-build.log)"
  # -k 0: build everything that can be built, so one unfinished file does not hide the rest.
  nice -n "${NICE:-10}" ninja -C "$build" -k 0 -j "$jobs" "${targets[@]}" >"$build/gpu-pack-build.log" 2>&1 || build_rc=$?
  if ((build_rc)); then
    say "the build had errors (the first ones; log: $build/gpu-pack-build.log):"
    grep -m 12 -E "error|FAILED" "$build/gpu-pack-build.log" | cut -c1-300 | sed 's/^/    /' || true
  fi
fi

# A target is built when no edge it depends on failed in this build (ninja -t inputs lists its
# inputs, recursively); an older output of a target that fails now is stale, packed only with
# --allow-missing.
declare -A output_of=([tandem_cuda]=engine/backend/cuda/libtandem_cuda.so [trainer]=tools/trainer
                      [gpu_train_bench]=bench/gpu_train_bench [onnx_bench]=bench/onnx_bench
                      [attention_bench]=bench/attention_bench)
for t in "${test_targets[@]}"; do output_of[$t]=tests/$t; done
failed_outputs=$(grep -o '^FAILED: .*' "$build/gpu-pack-build.log" 2>/dev/null | sed 's/^FAILED: //' | tr ' ' '\n' | sed '/^$/d' | sort -u || true)
((do_build)) || failed_outputs=""
built=() missing=() stale=()
for t in "${targets[@]}"; do
  out=${output_of[$t]}
  if [[ ! -f $build/$out ]]; then missing+=("$t")
  elif ((build_rc)) && [[ -n $failed_outputs ]] &&
       [[ -n $({ ninja -C "$build" -t inputs "$t"; echo "$out"; } | sort -u | comm -12 - <(echo "$failed_outputs")) ]]; then
    stale+=("$t")
  else built+=("$t"); fi
done
say "built: ${built[*]:-none}"
((${#stale[@]} == 0)) || say "STALE (an older output; its target does not build now): ${stale[*]}"
((${#missing[@]} == 0)) || say "MISSING (never built): ${missing[*]}"
if ((${#missing[@]} + ${#stale[@]} > 0 && !allow_missing)); then
  die "not every target built; fix the build, or pass --allow-missing for a dry run of the packaging"
fi
packed=("${built[@]}" "${stale[@]}")
[[ " ${packed[*]} " == *" trainer "* ]] || die "no trainer binary at all: it makes the data and runs the ResNet-20 epoch"

# --- 2. the Fashion-MNIST TFRecords of the default run -----------------------------------------
data=$build/gpu-data/fashion-mnist
make_split() {  # idx-prefix record-prefix
  "$build/tools/trainer" convert --source idx --images "$idx_dir/$1-images-idx3-ubyte.gz" \
    --labels "$idx_dir/$1-labels-idx1-ubyte.gz" --output "$data" --prefix "$2" --min-shards "$shards" --seed 1
}
if ! compgen -G "$data/train-*.tfrecord" >/dev/null || ! compgen -G "$data/test-*.tfrecord" >/dev/null ||
   [[ $(cat "$data/.shards" 2>/dev/null) != "$shards" ]]; then
  [[ -d $idx_dir ]] || die "$idx_dir is missing: apt-get install dataset-fashion-mnist"
  say "converting Fashion-MNIST to TFRecords in $data ($shards shards per split, seed 1, as the default run's prepare step)"
  rm -rf "$data" && mkdir -p "$data"
  make_split train train >"$build/gpu-pack-data.log" 2>&1 && make_split t10k test >>"$build/gpu-pack-data.log" 2>&1 ||
    { cat "$build/gpu-pack-data.log" >&2; die "trainer convert failed"; }
  echo "$shards" >"$data/.shards"
fi

# --- 3. stage ----------------------------------------------------------------------------------
say "staging in $stage"
rm -rf "$stage" && mkdir -p "$stage/lib/fallback" "$stage/data" "$stage/ctest/tests"
for t in "${packed[@]}"; do
  out=${output_of[$t]}
  mkdir -p "$stage/$(dirname "$out")"
  cp -L "$build/$out" "$stage/$out"
done
mkdir -p "$stage/engine/core"
cp -L "$build/engine/core/libtandem_core.so" "$stage/engine/core/"
cp -r "$data" "$stage/data/"
rm -f "$stage/data/fashion-mnist/.shards"

# Libraries that stay behind: the C runtime (any Linux has it) and the CUDA stack (the GPU machine
# has its own, matched to its driver; gpu_check.sh finds it). Everything else that ldd resolves goes.
is_system() { [[ $1 =~ ^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libutil|libresolv|libstdc\+\+|libgcc_s) ]]; }
is_cuda() {
  [[ $1 =~ ^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|nvrtc|nvJitLink|cufft|curand|cusolver|cusparse|cupti|nvidia-ml)[._] ]] ||
    [[ $2 == /usr/local/cuda* ]]
}
binaries=()
while IFS= read -r -d '' f; do binaries+=("$f"); done < <(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -not -path "$stage/data/*" -print0)
declare -A cuda_needed=()
unresolved=()
for bin in "${binaries[@]}"; do
  while read -r name _ path _; do
    # The vdso and the dynamic loader (listed by path) are the C runtime's.
    [[ -z $name || $name == statically || $name == /* ]] && continue
    if [[ $path == "not" ]]; then
      # Not found here: a CUDA library the loader finds only through RUNPATH (libtandem_cuda.so's),
      # or really missing.
      if is_cuda "$name" ""; then cuda_needed[$name]=1; else unresolved+=("$name (needed by ${bin#"$stage"/})"); fi
      continue
    fi
    [[ -z $path || $name == libtandem_core.so ]] && continue  # ours, staged above
    if is_cuda "$name" "$path"; then cuda_needed[$name]=1; continue; fi
    is_system "$name" && continue
    [[ -f $stage/lib/$name ]] || cp -L "$path" "$stage/lib/$name"
  done < <(ldd "$bin" | sed 's/^[[:space:]]*//; s/ (0x[0-9a-f]*)$//')
done
((${#unresolved[@]} == 0)) || die "ldd cannot resolve ${unresolved[*]} here: install it first"
# Fallback only: a GPU machine whose libstdc++ is older than GCC 12's gets these (gpu_check.sh adds
# them to the path only when ldd reports a missing GLIBCXX version).
for lib in libstdc++.so.6 libgcc_s.so.1; do
  path=$(ldconfig -p | awk -v n="$lib" '$1 == n && /x86-64/ && !seen++ {print $NF}')
  if [[ -n $path ]]; then cp -L "$path" "$stage/lib/fallback/$lib"; fi
done
printf '%s\n' "${!cuda_needed[@]}" | sort >"$stage/cuda_needed.txt"
say "CUDA libraries the GPU machine must provide: $(tr '\n' ' ' <"$stage/cuda_needed.txt")"

# Strip (symbols and debug info are most of a Release binary's size; dynamic symbols stay).
find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -not -path "$stage/data/*" -print0 |
  xargs -0 strip --strip-unneeded 2>/dev/null || true

# ctest files of the gpu tests, with this build's absolute paths replaced by placeholders that
# gpu_check.sh fills in with where the pack and the repository are on the GPU machine.
relocate() { sed -e "s#$build#@PACK_ROOT@#g" -e "s#$root#@SOURCE_ROOT@#g" "$1" >"$2"; }
printf 'subdirs("tests")\n' >"$stage/ctest/CTestTestfile.cmake"
: >"$stage/ctest/tests/CTestTestfile.cmake"
for t in "${test_targets[@]}"; do
  [[ " ${packed[*]} " == *" $t "* ]] || continue
  for f in "$build/tests/${t}[1]_include.cmake" "$build/tests/${t}[1]_tests.cmake"; do
    if [[ -f $f ]]; then relocate "$f" "$stage/ctest/tests/$(basename "$f")"; fi
  done
  printf 'include("@PACK_ROOT@/tests/%s[1]_include.cmake")\n' "$t" >>"$stage/ctest/tests/CTestTestfile.cmake"
done

glibc_needed=$(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -not -path "$stage/data/*" -not -path "$stage/lib/fallback/*" \
  -exec objdump -T {} + 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -t. -k2,2n -k3,3n -u | tail -1) || true
{
  echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git_commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "git_dirty_files=$(git -C "$root" status --porcelain 2>/dev/null | wc -l)"
  echo "build_host=$(. /etc/os-release && echo "$PRETTY_NAME"), $(gcc --version | sed -n 1p)"
  echo "cuda_toolkit=$(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  # What nvcc was told to generate (the architectures are a plain CMake variable, not cached).
  echo "cuda_architectures=$(grep -o 'arch=compute_[0-9a-z]*,code=\[[^]]*\]' "$build/build.ninja" | sort -u | sed 's/arch=//' | paste -sd' ')"
  echo "build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")"
  echo "targets_built=${built[*]}"
  echo "targets_stale=${stale[*]}"
  echo "targets_missing=${missing[*]}"
  echo "glibc_needed=${glibc_needed#GLIBC_}"
  echo "data_shards=$shards"
} >"$stage/MANIFEST"
say "manifest:" && sed 's/^/    /' "$stage/MANIFEST"

# --- 4. archive and sizes ----------------------------------------------------------------------
mkdir -p "$root/.gpu"
say "compressing (xz)"
tar -C "$stage" -cf - . | xz -T0 -6 >"$archive.tmp"
mv "$archive.tmp" "$archive"
archive_bytes=$(stat -c %s "$archive")
# What a device call sends: tracked files and untracked files git does not ignore, plus the archive.
# (A tracked file deleted in the work tree has no size: stat's complaint is dropped.)
tree_bytes=$(cd "$root" && { git ls-files -z --cached --others --exclude-standard 2>/dev/null || true; } |
  { xargs -0 -r stat -c %s -- 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
say "staged $(mib "$(du -sb "$stage" | cut -f1)") unpacked:"
du -sh "$stage"/* | sed 's/^/    /'
say "archive $archive: $(mib "$archive_bytes")"
say "working tree $(mib "$tree_bytes") + archive = $(mib $((tree_bytes + archive_bytes))) of the device call's 64 MiB"
if ((tree_bytes + archive_bytes > 62 * 1048576)); then
  die "too large to travel: over 62 MiB (keep 2 MiB spare for files changed before the call)"
fi
say "next: the device call in docs/GPU_CHECK.md (carry [\".gpu\"], command: bash tools/scripts/gpu_check.sh)"
