#include "engine/export/onnx_trace.h"

#include <algorithm>
#include <random>

#include "engine/autograd/variable.h"
#include "engine/core/context.h"

namespace tandem::exporter::detail {
namespace {

// Random values, so that a tensor computed from the input outside the traced ops differs between
// passes and is caught (a constant must be the same in every pass).
Tensor random_input(const OnnxInputSpec& spec, const std::vector<int64_t>& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::empty(Shape(std::span<const int64_t>(dims)), spec.dtype);
  if (spec.dtype == DType::kI64) {
    std::uniform_int_distribution<int64_t> id(0, spec.vocab_size - 1);
    std::generate_n(t.data<int64_t>(), t.numel(), [&] { return id(rng); });
  } else {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::generate_n(t.data<float>(), t.numel(), [&] { return normal(rng); });
  }
  return t;
}

void check_spec(const OnnxInputSpec& spec) {
  TANDEM_CHECK(!spec.shape.empty() && std::all_of(spec.shape.begin(), spec.shape.end(), [](int64_t d) { return d > 0; }),
               ErrorCode::kInvalidArgument, "export_onnx: input '{}' needs a shape of positive sizes to trace with",
               spec.name);
  TANDEM_CHECK(spec.dtype == DType::kF32 || spec.dtype == DType::kI64, ErrorCode::kInvalidArgument,
               "export_onnx: input '{}' must be f32 (images) or i64 (token ids), not {}", spec.name,
               dtype_name(spec.dtype));
  TANDEM_CHECK(spec.dtype != DType::kI64 || spec.vocab_size > 0, ErrorCode::kInvalidArgument,
               "export_onnx: token input '{}' needs vocab_size to draw ids from", spec.name);
  const int rank = static_cast<int>(spec.shape.size());
  for (const auto& [axis, name] : spec.dynamic_axes) {
    TANDEM_CHECK(axis >= 0 && axis < rank && !name.empty(), ErrorCode::kInvalidArgument,
                 "export_onnx: dynamic axis {} ('{}') of input '{}' is not an axis of its {} dimensions", axis, name,
                 spec.name, rank);
  }
}

void check_same_ops(const TracePasses& t, const OnnxInputSpec& spec) {
  const auto& base = t.tracers[0].ops();
  for (size_t p = 1; p < t.passes(); ++p) {
    const auto& ops = t.tracers[p].ops();
    const int axis = t.dynamic_axes[p - 1];
    bool same = ops.size() == base.size();
    for (size_t i = 0; same && i < ops.size(); ++i) same = ops[i].op == base[i].op;
    TANDEM_CHECK(same, ErrorCode::kInvalidArgument,
                 "export_onnx: the forward runs other ops when axis {} ('{}') of input '{}' is {} instead of {} "
                 "({} ops instead of {}), so that axis cannot be dynamic; export with it fixed",
                 axis, spec.dynamic_axes.at(axis), spec.name, t.inputs[p].dim(axis), t.inputs[0].dim(axis), ops.size(),
                 base.size());
  }
}

}  // namespace

std::optional<SymbolicDim> TracePasses::solve(std::span<const int64_t> sizes) const {
  SymbolicDim d;
  int64_t divisor = 1;
  for (size_t i = 0; i < dynamic_axes.size(); ++i) {
    if (sizes[1 + i] == sizes[0]) continue;
    d.axes.push_back(dynamic_axes[i]);
    divisor *= inputs[0].dim(dynamic_axes[i]);
  }
  if (sizes[0] % divisor != 0) return std::nullopt;
  d.factor = sizes[0] / divisor;
  for (size_t p = 0; p < passes(); ++p) {
    int64_t expected = d.factor;
    for (int axis : d.axes) expected *= inputs[p].dim(axis);
    if (expected != sizes[p]) return std::nullopt;
  }
  return d;
}

TracePasses trace_passes(nn::Module& model, const OnnxInputSpec& spec) {
  check_spec(spec);
  TracePasses t;
  for (const auto& entry : spec.dynamic_axes) t.dynamic_axes.push_back(entry.first);
  t.inputs.push_back(random_input(spec, spec.shape, 1));
  for (size_t i = 0; i < t.dynamic_axes.size(); ++i) {
    std::vector<int64_t> dims = spec.shape;
    int64_t& d = dims[static_cast<size_t>(t.dynamic_axes[i])];
    d = d > 1 ? d - 1 : d + 1;
    t.inputs.push_back(random_input(spec, dims, static_cast<uint32_t>(2 + i)));
  }
  for (const auto& p : model.parameters()) {
    TANDEM_CHECK(p.value().device().is_cpu(), ErrorCode::kInvalidArgument,
                 "export_onnx traces the model on the CPU, but parameter '{}' is on {}: call model.to(Device::cpu()) "
                 "first",
                 p.name(), p.value().device().str());
  }
  const bool was_training = model.is_training();
  model.eval();
  ExecutionContext ctx(Device::cpu(), 0, 0);
  t.tracers.resize(t.inputs.size());
  try {
    autograd::NoGradGuard no_grad;
    for (size_t p = 0; p < t.inputs.size(); ++p) {
      autograd::TraceGuard guard(t.tracers[p]);
      t.outputs.push_back(model.forward(ctx, autograd::Variable(t.inputs[p])).value());
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  check_same_ops(t, spec);
  return t;
}

}  // namespace tandem::exporter::detail
