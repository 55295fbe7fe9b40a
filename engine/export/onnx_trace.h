// The traces an ONNX export is built from (internal to engine/export): the model's forward run once
// on the input as specified, once more per dynamic axis with that axis resized (which sizes follow
// it), and a last time with every dynamic axis resized the other way and other random values (which
// must confirm every size solved, and leave every constant as it was: a size that is no product of
// the axes, as a pooled length that is the same for 8 and 7 rows, or a value computed from the input
// outside the ops, shows there even without dynamic axes).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "engine/autograd/trace.h"
#include "engine/export/onnx_export.h"

namespace tandem::exporter::detail {

// factor x the product of the input's sizes along `axes` (sorted); no axes: the constant factor.
struct SymbolicDim {
  int64_t factor = 0;
  std::vector<int> axes;
  bool constant() const { return axes.empty(); }
  bool operator==(const SymbolicDim&) const = default;
};

struct TracePasses {
  std::vector<int> dynamic_axes;           // sorted input axes
  // [0] as specified, [1 + i] with dynamic_axes[i] resized, [last] the check: every axis resized
  std::vector<Tensor> inputs;
  std::vector<autograd::Tracer> tracers;   // one per input
  std::vector<Tensor> outputs;             // the forward's result, one per input

  size_t passes() const { return inputs.size(); }
  // The size seen in each pass for one quantity (sizes[p]) as a SymbolicDim; nullopt when it is not
  // such a product (T + 1, say).
  std::optional<SymbolicDim> solve(std::span<const int64_t> sizes) const;
};

// Runs the passes on the CPU in eval mode without gradients; the model's mode is restored after.
// InvalidArgument when the passes run different ops (a forward that branches on the input's size).
TracePasses trace_passes(nn::Module& model, const OnnxInputSpec& spec);

}  // namespace tandem::exporter::detail
