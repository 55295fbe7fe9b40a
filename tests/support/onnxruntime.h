// Running an exported ONNX model under onnxruntime itself (npm's onnxruntime-node, driven by
// tools/scripts/onnx_run.js in a node process), for the tests that hold exports to Tandem's forward.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace tandem::testing {

// Empty when node and onnxruntime-node are installed (tools/scripts/install_onnxruntime.sh); else
// why a test must skip.
std::string onnxruntime_skip_reason();

struct OnnxRuntimeOutput {
  std::vector<int64_t> dims;
  std::vector<float> values;
};

// The model's output `output_name` for one input (f32 or i64 on the CPU). Throws with node's
// message when onnxruntime fails.
OnnxRuntimeOutput run_onnxruntime(const std::filesystem::path& model, const std::string& input_name,
                                  const Tensor& input, const std::string& output_name = "logits");

}  // namespace tandem::testing
