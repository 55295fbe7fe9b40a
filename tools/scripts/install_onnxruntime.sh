#!/usr/bin/env bash
# Installs onnxruntime itself for the tests that run exported models (npm's onnxruntime-node, with
# its CPU binaries inside the package) into .deps/, only when missing. --ignore-scripts: the
# package's install script fetches optional GPU binaries from a host our machines cannot reach.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=1.31.1
package=.deps/node_modules/onnxruntime-node/package.json

if [ -f "$package" ] && grep -q "\"version\": \"$version\"" "$package"; then
  echo "install_onnxruntime: onnxruntime-node $version present in .deps/"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install_onnxruntime: npm is missing; installing Debian's nodejs and npm"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi
mkdir -p .deps
npm install --prefix .deps --ignore-scripts --no-audit --no-fund --no-save "onnxruntime-node@$version"
node -e "require('./.deps/node_modules/onnxruntime-node'); console.log('install_onnxruntime: onnxruntime-node $version works')"
