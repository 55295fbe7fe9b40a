// ONNX export: a Module's eval-mode forward pass as an ONNX model that onnxruntime, TensorRT and
// OpenVINO run. The forward is traced (autograd/trace.h) on random inputs, once as given, once
// more for each dynamic axis with that axis resized, and once to check with all of them resized
// another way and other values, so that every size that follows an input axis (a reshape to (batch,
// tokens, heads, dims)) is written as a computation on the input's shape, not as the number seen
// while tracing, and a value computed from the input outside the ops is caught. Each traced op becomes the ONNX operators
// that compute exactly it; an op without a faithful ONNX form at the requested opset is an error
// naming the op and the opset that has one. The file is checked with ONNX's own checker and full
// shape inference (libonnx) before it is written. docs/EXPORT.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/nn/module.h"

namespace tandem::exporter {

// The model's input as the exported file declares it, and what the model expects of it.
struct OnnxInputSpec {
  std::string name = "input";  // "input_ids" for a token model
  DType dtype = DType::kF32;   // kF32 images, kI64 token ids
  // A shape the model accepts, used for tracing: (N, C, H, W) images, (N, T) tokens.
  std::vector<int64_t> shape;
  // axis -> its name in the file ("batch", "sequence"); those axes may take any size at run time.
  std::map<int, std::string> dynamic_axes = {{0, "batch"}};
  int64_t vocab_size = 0;  // token ids: traced inputs are drawn from [0, vocab_size)
  // Written into the model's metadata (metadata_props), for whoever feeds it:
  std::string layout = "NCHW";       // "NCHW" for images, "NT" for tokens
  std::vector<float> mean, std;      // per-channel normalisation applied before the model, if any
  std::map<std::string, std::string> metadata;  // anything else: the model's name, classes, step
  std::string output_name = "logits";
};

struct OnnxExportOptions {
  // 13 to 17 (ONNX 1.12, Debian's libonnx, knows opsets up to 17). LayerNormalization needs 17.
  int opset = 17;
  std::string graph_name = "tandem";
};

struct OnnxExportSummary {
  int opset = 0;
  int64_t nodes = 0, initializers = 0, parameters = 0;  // parameters: elements of the initializers
  uint64_t file_bytes = 0;
  std::vector<std::string> onnx_ops;  // the operator types used, sorted
};

inline constexpr int kMinOnnxOpset = 13;
inline constexpr int kMaxOnnxOpset = 17;

// Traces `model` (set to eval mode for the trace, its mode restored after; its parameters must be
// on the CPU), builds, checks and writes the ONNX file. InvalidArgument for a bad spec or opset,
// Unimplemented for an op without an ONNX form, Internal when ONNX's checker refuses the result.
OnnxExportSummary export_onnx(nn::Module& model, const OnnxInputSpec& input, const std::filesystem::path& path,
                              const OnnxExportOptions& options = {});

// The same model as bytes (a serialized, checked onnx.ModelProto), for callers that keep it in memory.
std::string export_onnx_bytes(nn::Module& model, const OnnxInputSpec& input, const OnnxExportOptions& options = {},
                              OnnxExportSummary* summary = nullptr);

}  // namespace tandem::exporter
