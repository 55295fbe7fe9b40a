#!/usr/bin/env node
// Runs an exported model under onnxruntime (npm's onnxruntime-node, which
// tools/scripts/install_onnxruntime.sh installs into .deps/):
//   node tools/scripts/onnx_run.js MODEL.onnx NAME=DTYPE:D0xD1x...:FILE [...] --output-dir DIR
// DTYPE is float32 or int64; FILE holds the input's raw little-endian values. Each output is
// written to DIR/NAME.bin as raw float32, and stdout gets one JSON object naming the outputs, their
// dims and files, and the session's input and output names.
'use strict';
const fs = require('fs');
const path = require('path');

function loadOrt() {
  const where = process.env.TANDEM_ONNXRUNTIME_NODE ||
      path.resolve(__dirname, '../../.deps/node_modules/onnxruntime-node');
  try {
    return require(where);
  } catch (e) {
    console.error(`onnx_run: onnxruntime-node is not at ${where} (run tools/scripts/install_onnxruntime.sh, ` +
                  `or set TANDEM_ONNXRUNTIME_NODE): ${e.message}`);
    process.exit(3);
  }
}

function parseInput(ort, spec) {
  const m = /^([^=]+)=(float32|int64):([0-9x]+):(.+)$/.exec(spec);
  if (!m) throw new Error(`input '${spec}' is not NAME=DTYPE:D0xD1x...:FILE`);
  const [, name, dtype, dimText, file] = m;
  const dims = dimText.split('x').map(Number);
  const bytes = fs.readFileSync(file);
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
  const data = dtype === 'float32' ? new Float32Array(buffer) : new BigInt64Array(buffer);
  const count = dims.reduce((a, b) => a * b, 1);
  if (data.length !== count) throw new Error(`input ${name}: ${file} holds ${data.length} values, dims ${dimText} need ${count}`);
  return [name, new ort.Tensor(dtype, data, dims)];
}

async function main() {
  const args = process.argv.slice(2);
  const outAt = args.indexOf('--output-dir');
  if (args.length < 2 || outAt < 0 || outAt + 1 >= args.length) {
    console.error('usage: onnx_run.js MODEL.onnx NAME=DTYPE:DIMS:FILE [...] --output-dir DIR');
    process.exit(2);
  }
  const outputDir = args[outAt + 1];
  const rest = args.filter((_, i) => i !== outAt && i !== outAt + 1);
  const ort = loadOrt();
  const session = await ort.InferenceSession.create(rest[0], {intraOpNumThreads: 2, interOpNumThreads: 1});
  const feeds = Object.fromEntries(rest.slice(1).map((s) => parseInput(ort, s)));
  const results = await session.run(feeds);
  const outputs = {};
  for (const [name, tensor] of Object.entries(results)) {
    const file = path.join(outputDir, `${name}.bin`);
    const values = Float32Array.from(tensor.data, Number);  // int64 outputs come as BigInt
    fs.writeFileSync(file, Buffer.from(values.buffer));
    outputs[name] = {dims: tensor.dims, file};
  }
  console.log(JSON.stringify({inputs: session.inputNames, outputs}));
}

main().catch((e) => {
  console.error(`onnx_run: ${e.message}`);
  process.exit(1);
});
