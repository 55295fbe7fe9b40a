#!/usr/bin/env bash
# Checks DESIGN.md's dependency direction on every project #include:
# core < backend < autograd < nn < optim < distribute < train < export; data on core alone;
# models on nn and below; include/ (the public headers) and examples/ on anything but tools;
# tools on anything; nothing includes tools but tools and its own
# tests (tests/tools, which count as tools here); CUDA code only in
# engine/backend/cuda. Prints each violation and exits 1 if there is any.
set -uo pipefail
root="${1:-$(dirname "$0")/../..}"
cd "$root" || exit 2

order=(core backend autograd nn optim distribute train export)
rank_of() {
  local i
  for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo -1
}

# The layer a path belongs to: an engine folder's name, or data/models/tools/tests/bench/third_party.
layer_of() {
  case "$1" in
    tests/tools/*|tests/fuzz/*) echo tools ;;
    engine/*) echo "$1" | cut -d/ -f2 ;;
    *) echo "$1" | cut -d/ -f1 ;;
  esac
}

allowed() {  # allowed FROM_LAYER TO_LAYER
  local from="$1" to="$2"
  [ "$from" = "$to" ] && return 0
  [ "$to" = "third_party" ] && return 0
  case "$from" in
    tools|tests|bench) [ "$to" != "tools" ] || [ "$from" = "tools" ]; return ;;
    include|examples) [ "$to" != "tools" ]; return ;;  # the public headers, and programs using them
    data) [ "$to" = "core" ]; return ;;
    models) [ "$to" = "tools" ] && return 1; local r; r=$(rank_of "$to"); [ "$r" -ge 0 ] && [ "$r" -le "$(rank_of nn)" ]; return ;;
  esac
  local rf rt
  rf=$(rank_of "$from"); rt=$(rank_of "$to")
  [ "$rf" -ge 0 ] && [ "$rt" -ge 0 ] && [ "$rt" -le "$rf" ]
}

status=0
while IFS= read -r file; do
  from=$(layer_of "$file")
  while IFS= read -r inc; do
    to=$(layer_of "$inc")
    if ! allowed "$from" "$to"; then
      echo "layering: $file includes $inc ($from may not depend on $to)"
      status=1
    fi
  done < <(grep -oE '^#include "(engine|data|models|tools|third_party)/[^"]+"' "$file" | sed -E 's/^#include "([^"]+)"/\1/')
  case "$file" in
    engine/backend/cuda/*|engine/backend/host_device.h|tests/*|bench/*) ;;
    *)
      if grep -qE '^#include <(cuda|cudnn|cublas|nccl)[^>]*>|#if(def)? .*CUDA' "$file"; then
        echo "layering: $file uses CUDA outside engine/backend/cuda"
        status=1
      fi
      ;;
  esac
done < <(git ls-files -co --exclude-standard -- '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null || find engine data models tools tests bench -name '*.h' -o -name '*.cpp')

# target_clones makes an ifunc whose resolver runs while the program loads, before ThreadSanitizer's
# runtime starts: every TSan build then crashes at start. Dispatch on __builtin_cpu_supports instead.
if git grep -nE 'target_clones *\(' -- '*.cpp' '*.h' >/dev/null 2>&1; then
  git grep -nE 'target_clones *\(' -- '*.cpp' '*.h' | sed 's/^/layering: target_clones (crashes TSan builds): /'
  status=1
fi

[ $status -eq 0 ] && echo "layering: every include follows DESIGN.md's dependency direction"
exit $status
