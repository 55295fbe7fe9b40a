#!/usr/bin/env bash
# The installed package, as a program outside the source tree sees it: installs BUILD_DIR into a
# temporary prefix, checks that internals and debug information stayed out and that each public
# header compiles alone with pkg-config's flags and nothing else, builds the examples (copied out
# of the tree) against the prefix alone and runs their own ctest, runs docs/EMBEDDING.md's Trainer
# snippet as written, compiles programs through pkg-config (one of them reaching every library),
# and one linking Tandem::tandem_cli alone.
#   install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "== install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for internal in engine/backend/kernels.h engine/backend/plugin_abi.h engine/backend/registry.h \
                engine/distribute/cpu_rendezvous.h engine/backend/cpu engine/backend/cuda; do
  if [ -e "$prefix/include/tandem/$internal" ]; then
    echo "FAIL: the internal $internal was installed"
    exit 1
  fi
done
[ -f "$prefix/lib/cmake/Tandem/TandemConfig.cmake" ] && [ -f "$prefix/lib/cmake/Tandem/TandemConfigVersion.cmake" ]
[ -f "$prefix/lib/pkgconfig/tandem.pc" ]
echo "installed: $(du -sh "$prefix" | cut -f1)"
if ! grep -q "^TANDEM_INSTALL_DEBUG_INFO:BOOL=ON" "$build/CMakeCache.txt"; then
  for library in "$prefix"/lib/libtandem_*; do
    if readelf -S -W "$library" | grep -q '\.debug_info'; then
      echo "FAIL: $library was installed with its debug information"
      exit 1
    fi
  done
fi

echo "== each public header on its own, with pkg-config's flags alone"
cflags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags tandem)
case " $cflags " in
  *"/include/tandem "*) echo "FAIL: pkg-config puts include/tandem itself on the include path: $cflags"; exit 1 ;;
esac
if grep -rn '^#include "\(engine\|data\|models\)/' "$prefix/include"; then
  echo "FAIL: installed headers include the engine's paths without tandem/ (found only through include/tandem)"
  exit 1
fi
for header in "$prefix"/include/tandem/*.h; do
  name=$(basename "$header")
  echo "#include <tandem/$name>" >"$work/one.cpp"
  # shellcheck disable=SC2086
  c++ -fsyntax-only -Wall -Wextra -Werror $cflags "$work/one.cpp" ||
    { echo "FAIL: <tandem/$name> does not compile on its own with pkg-config's flags ($cflags)"; exit 1; }
done

echo "== the examples, built against the prefix alone"
cp -r "$src/examples" "$work/examples"
for example in custom_model manual_loop ops_tour mini_gpt; do
  cmake -S "$work/examples/$example" -B "$work/build-$example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure-$example.log" ||
    { cat "$work/configure-$example.log"; exit 1; }
  cmake --build "$work/build-$example"
  ctest --test-dir "$work/build-$example" --output-on-failure --verbose --timeout 600 | grep -E "^[0-9]+: (ok|FAIL|loss|done)|tests passed"
done

echo "== docs/EMBEDDING.md's Trainer snippet, as written, into a run directory nobody made"
mkdir -p "$work/snippet"
awk '/^\*\*The run\*\*/ { run = 1 } run && /^```cpp/ { copy = 1; next } copy && /^```/ { exit } copy' \
  "$src/docs/EMBEDDING.md" >"$work/snippet/trainer_snippet.inc"
grep -q "train::Trainer(" "$work/snippet/trainer_snippet.inc" ||
  { echo "FAIL: no Trainer snippet after **The run** in docs/EMBEDDING.md"; exit 1; }
cp "$src/tests/install/trainer_snippet.cpp" "$work/snippet/main.cpp"
cat >"$work/snippet/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(trainer_snippet LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(Tandem 0.1 REQUIRED)
set(example ${EXAMPLES}/custom_model)
add_executable(trainer_snippet main.cpp ${example}/text_model.cpp ${example}/text_data.cpp ${example}/text_training.cpp)
target_include_directories(trainer_snippet PRIVATE ${example} ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(trainer_snippet PRIVATE -Wall -Wextra -Werror)
target_link_libraries(trainer_snippet PRIVATE Tandem::tandem)
CMAKE
cmake -S "$work/snippet" -B "$work/build-snippet" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DEXAMPLES="$work/examples" >"$work/snippet.log" || { cat "$work/snippet.log"; exit 1; }
cmake --build "$work/build-snippet" >>"$work/snippet.log" || { cat "$work/snippet.log"; exit 1; }
if ! "$work/build-snippet/trainer_snippet" "$work/snippet-run" >"$work/snippet-run.log" 2>&1; then
  cat "$work/snippet-run.log"
  echo "FAIL: docs/EMBEDDING.md's Trainer snippet"
  exit 1
fi
grep "^ok" "$work/snippet-run.log"

echo "== pkg-config"
cat >"$work/version.cpp" <<'CPP'
#include <tandem/tandem.h>
#include <cstdio>
int main() { std::printf("%s\n", std::string(tandem::version()).c_str()); }
CPP
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs tandem)
# shellcheck disable=SC2086
c++ "$work/version.cpp" -o "$work/version" $flags
got=$("$work/version")
want=$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/tandem.pc")
[ "$got" = "$want" ] || { echo "FAIL: tandem::version() says $got, tandem.pc $want"; exit 1; }
echo "== pkg-config: the verbs, which reach every library (Gloo's too)"
cat >"$work/cli.cpp" <<'CPP'
#include <tandem/cli.h>
int main(int argc, char** argv) { return tandem::trainer_main(argc, argv); }
CPP
# shellcheck disable=SC2086
c++ "$work/cli.cpp" -o "$work/cli" $flags
"$work/cli" version | grep -q "$want" || { echo "FAIL: the pkg-config build of the verbs"; exit 1; }

echo "== Tandem::tandem_cli alone"
mkdir -p "$work/cli-only"
cp "$work/cli.cpp" "$work/cli-only/main.cpp"
cat >"$work/cli-only/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(cli_only LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(Tandem 0.1 REQUIRED)
add_executable(cli_only main.cpp)
target_link_libraries(cli_only PRIVATE Tandem::tandem_cli)
CMAKE
cmake -S "$work/cli-only" -B "$work/build-cli-only" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >"$work/cli-only.log" ||
  { cat "$work/cli-only.log"; exit 1; }
cmake --build "$work/build-cli-only" >>"$work/cli-only.log" || { cat "$work/cli-only.log"; exit 1; }
"$work/build-cli-only/cli_only" version | grep -q "$want" || { echo "FAIL: Tandem::tandem_cli alone"; exit 1; }
echo "install test: passed (Tandem $got)"
