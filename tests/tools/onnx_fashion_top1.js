#!/usr/bin/env node
// Top-1 of an exported Fashion-MNIST classifier under onnxruntime, on the idx files themselves:
//   node onnx_fashion_top1.js MODEL.onnx IMAGES.gz LABELS.gz MEAN STD
// Each 28x28 image is fed as (pixel / 255 - MEAN) / STD, NCHW, in batches of 500; prints
// {"examples": N, "top1": FRACTION}. Independent of Tandem's input pipeline on purpose.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const ort = require(process.env.TANDEM_ONNXRUNTIME_NODE ||
                    path.resolve(__dirname, '../../.deps/node_modules/onnxruntime-node'));

async function main() {
  const [model, imagesPath, labelsPath, meanText, stdText] = process.argv.slice(2);
  const images = zlib.gunzipSync(fs.readFileSync(imagesPath));
  const labels = zlib.gunzipSync(fs.readFileSync(labelsPath));
  const count = images.readUInt32BE(4), rows = images.readUInt32BE(8), cols = images.readUInt32BE(12);
  const mean = Number(meanText), std = Number(stdText), pixels = rows * cols;
  const session = await ort.InferenceSession.create(model, {intraOpNumThreads: 2, interOpNumThreads: 1});
  const input = session.inputNames[0], output = session.outputNames[0];
  let correct = 0;
  for (let start = 0; start < count; start += 500) {
    const n = Math.min(500, count - start);
    const x = new Float32Array(n * pixels);
    for (let i = 0; i < n * pixels; ++i) x[i] = (images[16 + start * pixels + i] / 255 - mean) / std;
    const result = await session.run({[input]: new ort.Tensor('float32', x, [n, 1, rows, cols])});
    const logits = result[output].data, classes = result[output].dims[1];
    for (let i = 0; i < n; ++i) {
      let best = 0;
      for (let k = 1; k < classes; ++k) if (logits[i * classes + k] > logits[i * classes + best]) best = k;
      if (best === labels[8 + start + i]) ++correct;
    }
  }
  console.log(JSON.stringify({examples: count, top1: correct / count}));
}

main().catch((e) => {
  console.error(`onnx_fashion_top1: ${e.message}`);
  process.exit(1);
});
