#!/usr/bin/env node
// The reference of bench/onnx_bench on the CPU: onnxruntime (npm's onnxruntime-node, from .deps/)
// runs DIR/model.onnx on DIR/input.bin, is timed the same way (warm-up, then ITERS runs), and its
// logits are compared with DIR/tandem_logits.bin. One JSON line.
//   node bench/onnx_ort_bench.js DIR BATCH INPUT_SIZE [ITERS] [WARMUP] [THREADS]
'use strict';
const fs = require('fs');
const path = require('path');

const ort = require(process.env.TANDEM_ONNXRUNTIME_NODE ||
                    path.resolve(__dirname, '../.deps/node_modules/onnxruntime-node'));

function floats(file) {
  const b = fs.readFileSync(file);
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

async function main() {
  const [dir, batch, size, iters = '10', warmup = '2', threads = '2'] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'),
                                                    {intraOpNumThreads: Number(threads), interOpNumThreads: 1});
  const x = new ort.Tensor('float32', floats(path.join(dir, 'input.bin')), [Number(batch), 3, Number(size), Number(size)]);
  let y;
  for (let i = 0; i < Number(warmup); ++i) y = await session.run({input: x});
  const start = process.hrtime.bigint();
  for (let i = 0; i < Number(iters); ++i) y = await session.run({input: x});
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const ours = floats(path.join(dir, 'tandem_logits.bin')), theirs = y.logits.data;
  let largest = 0, worst = 0;
  for (let i = 0; i < ours.length; ++i) {
    largest = Math.max(largest, Math.abs(ours[i]));
    worst = Math.max(worst, Math.abs(ours[i] - theirs[i]));
  }
  console.log(JSON.stringify({provider: 'cpu', ort_ms_per_batch: 1e3 * seconds / Number(iters),
                              ort_images_per_s: Number(batch) * Number(iters) / seconds,
                              max_abs_logit: largest, max_abs_difference: worst}));
}

main().catch((e) => {
  console.error(`onnx_ort_bench: ${e.message}`);
  process.exit(1);
});
