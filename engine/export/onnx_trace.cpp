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
  TANDEM_CHECK(!spec.name.empty() && !spec.output_name.empty() && spec.name != spec.output_name,
               ErrorCode::kInvalidArgument,
               "export_onnx: the input and output need two different, non-empty names (got '{}' and '{}')", spec.name,
               spec.output_name);
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
    bool same = ops.size() == base.size();
    for (size_t i = 0; same && i < ops.size(); ++i) {
      same = ops[i].op == base[i].op && ops[i].inputs.size() == base[i].inputs.size();
    }
    TANDEM_CHECK(same, ErrorCode::kInvalidArgument,
                 "export_onnx: the forward runs other ops when input '{}' is {} instead of {} ({} ops instead of {}), so "
                 "its dynamic axes cannot be dynamic; export with them fixed",
                 spec.name, t.inputs[p].shape().str(), t.inputs[0].shape().str(), ops.size(), base.size());
  }
}

// Each module's own mode: a model may hold submodules kept in eval mode on purpose (frozen batch
// norm), which Module::train(bool), recursive, would overwrite.
std::vector<std::pair<nn::Module*, bool>> modes_of(nn::Module& m) {
  std::vector<std::pair<nn::Module*, bool>> modes{{&m, m.is_training()}};
  for (auto& [name, child] : m.named_children()) {
    auto below = modes_of(*child);
    modes.insert(modes.end(), below.begin(), below.end());
  }
  return modes;
}

// Pre-order: a parent's recursive train() first, then its children's own modes over it.
void restore(const std::vector<std::pair<nn::Module*, bool>>& modes) {
  for (const auto& [module, training] : modes) module->train(training);
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
  for (size_t p = 0; p < passes(); ++p) {  // the check pass included
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
  // The probes go down (up from 1), the check up (2 from 1): three sizes per axis.
  std::vector<int64_t> check = spec.shape;
  for (size_t i = 0; i < t.dynamic_axes.size(); ++i) {
    std::vector<int64_t> dims = spec.shape;
    const auto axis = static_cast<size_t>(t.dynamic_axes[i]);
    dims[axis] = dims[axis] > 1 ? dims[axis] - 1 : 2;
    check[axis] = spec.shape[axis] > 1 ? spec.shape[axis] + 1 : 3;
    t.inputs.push_back(random_input(spec, dims, static_cast<uint32_t>(2 + i)));
  }
  t.inputs.push_back(random_input(spec, check, 1000));
  for (const auto& p : model.parameters()) {
    TANDEM_CHECK(p.value().device().is_cpu(), ErrorCode::kInvalidArgument,
                 "export_onnx traces the model on the CPU, but parameter '{}' is on {}: call model.to(Device::cpu()) "
                 "first",
                 p.name(), p.value().device().str());
  }
  const auto modes = modes_of(model);
  model.eval();
  ExecutionContext ctx(Device::cpu(), 0, 0);
  t.tracers.resize(t.inputs.size());
  try {
    autograd::NoGradGuard no_grad;
    for (size_t p = 0; p < t.inputs.size(); ++p) {
      autograd::TraceGuard guard(t.tracers[p]);
      t.outputs.push_back(model.forward(ctx, autograd::Variable(t.inputs[p])).value());
      TANDEM_CHECK(t.tracers[p].pending_op().empty(), ErrorCode::kInternal,
                   "export_onnx: op '{}' set trace attributes and never recorded itself", t.tracers[p].pending_op());
    }
  } catch (...) {
    restore(modes);
    throw;
  }
  restore(modes);
  check_same_ops(t, spec);
  return t;
}

}  // namespace tandem::exporter::detail
