#!/usr/bin/env bash
# The installed package, as a program outside the source tree sees it: installs BUILD_DIR into a
# temporary prefix, checks that internals stayed out and that each public header compiles alone
# against the prefix, builds the examples (copied out of the tree) against the prefix alone and
# runs their own ctest, compiles programs through pkg-config (one of them reaching every library),
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

echo "== each public header on its own"
for header in "$prefix"/include/tandem/*.h; do
  name=$(basename "$header")
  echo "#include <tandem/$name>" >"$work/one.cpp"
  c++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I"$prefix/include" -I"$prefix/include/tandem" "$work/one.cpp" ||
    { echo "FAIL: <tandem/$name> does not compile on its own against the prefix"; exit 1; }
done

echo "== the examples, built against the prefix alone"
cp -r "$src/examples" "$work/examples"
for example in custom_model manual_loop; do
  cmake -S "$work/examples/$example" -B "$work/build-$example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure-$example.log" ||
    { cat "$work/configure-$example.log"; exit 1; }
  cmake --build "$work/build-$example"
  ctest --test-dir "$work/build-$example" --output-on-failure --verbose --timeout 600 | grep -E "^[0-9]+: (ok|FAIL|loss|done)|tests passed"
done

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
