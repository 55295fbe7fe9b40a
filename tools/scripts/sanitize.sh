#!/usr/bin/env bash
# Builds the test executables with sanitizers and runs them.
#   sanitize.sh address,undefined   every unit test under ASan + UBSan
#   sanitize.sh thread              the multi-threaded tests (thread pool, loaders, replicas) under TSan
# The CUDA plugin and benchmarks are left out: the sanitizers check our host code.
set -euo pipefail
cd "$(dirname "$0")/../.."
kind="${1:?usage: sanitize.sh address,undefined|thread}"
dir="build-san-${kind//,/-}"

# -O1 -g1: sanitizer reports keep their line numbers, and the build stays inside CI's time.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DTANDEM_SANITIZE="$kind" \
  -DTANDEM_WITH_CUDA=OFF -DTANDEM_BUILD_BENCH=OFF
if [ "$kind" = "thread" ]; then
  # Only the executables that hold the threaded suites of tools/scripts/tsan_tests.txt.
  targets="test_core test_pipeline test_distribute test_train"
else
  targets=$(cmake --build "$dir" --target help | sed -nE 's/^(test_[a-z_]+): .*/\1/p' | grep -v '_gpu$' | tr '\n' ' ')
fi
# shellcheck disable=SC2086
cmake --build "$dir" -j "$(nproc)" --target $targets

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tools/scripts/lsan.supp:print_suppressions=0
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
if [ "$kind" = "thread" ]; then
  # GCC's OpenMP runtime is not instrumented: with one OpenMP thread per replica no OpenMP
  # worker threads exist, so TSan sees only our own threads (replicas, communicators, loaders).
  export OMP_NUM_THREADS=1
  ctest --test-dir "$dir" --output-on-failure -L unit -R "$(cat tools/scripts/tsan_tests.txt | paste -sd'|')" --timeout 900
else
  ctest --test-dir "$dir" --output-on-failure -L unit -j "$(nproc)" --timeout 900
fi
