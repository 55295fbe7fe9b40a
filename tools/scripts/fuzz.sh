#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, clang) of every reader that takes outside input: TFRecord
# framing, both tf.Example parsers, the YAML run config, safetensors, meta.json and the requests the
# multi-process rendezvous reads from the network (tests/fuzz),
# each for a bounded time under ASan + UBSan, from the seeds of tools/scripts/fuzz_seeds.py.
#   fuzz.sh [SECONDS_PER_TARGET]   (default 60)
# A crash, leak, sanitizer report, timeout or an exception other than tandem::Error fails the run;
# the input is kept as build-fuzz/crashes/<target>-crash-<sha1> (or -leak-, -timeout-). Reproduce:
#   build-fuzz/tests/fuzz/<target> build-fuzz/crashes/<file>
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
dir=build-fuzz
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is missing: apt-get install clang" >&2; exit 1; }
targets="tfrecord_fuzz example_fuzz config_fuzz safetensors_fuzz meta_json_fuzz rendezvous_fuzz"

CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DTANDEM_SANITIZE=address,undefined -DTANDEM_FUZZ=ON -DTANDEM_WITH_CUDA=OFF -DTANDEM_BUILD_BENCH=OFF \
  -DTANDEM_BUILD_TESTS=OFF >/dev/null
# shellcheck disable=SC2086
cmake --build "$dir" -j "$(nproc)" --target $targets
python3 tools/scripts/fuzz_seeds.py "$dir/seeds"

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tools/scripts/lsan.supp:print_suppressions=0
mkdir -p "$dir/crashes"
failed=""
for t in $targets; do
  mkdir -p "$dir/corpus/$t"
  echo "=== fuzzing $t for ${seconds} s"
  if ! "$dir/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$dir/crashes/$t-" "$dir/corpus/$t" "$dir/seeds/$t" 2>"$dir/$t.log"; then
    tail -40 "$dir/$t.log"
    failed="$failed $t"
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$dir/$t.log" | tr '\n' ' '
    echo
  fi
done
if [ -n "$failed" ]; then
  echo "fuzz.sh: failed:$failed; inputs kept in $dir/crashes:" >&2
  ls -l "$dir/crashes" >&2
  exit 1
fi
echo "fuzz.sh: no finding in ${seconds} s per target"
