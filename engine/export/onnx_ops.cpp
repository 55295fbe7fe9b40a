#include "engine/export/onnx_ops.h"

#include <cstring>
#include <type_traits>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tandem::exporter::detail {
namespace {

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ha = a.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  const Tensor hb = b.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  return std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

// Tensors are compared where they are resolved (OpContext::resolve); everything else by value.
bool same_attribute(const autograd::TraceAttribute& a, const autograd::TraceAttribute& b) {
  if (a.index() != b.index()) return false;
  if (std::holds_alternative<Tensor>(a)) return true;
  return std::visit(
      [&b](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Tensor>) {
          return true;
        } else {
          return x == std::get<T>(b);
        }
      },
      a);
}

std::vector<int64_t> dims_of(const Tensor& t) {
  auto d = t.shape().dims();
  return {d.begin(), d.end()};
}

}  // namespace

std::string OpContext::describe() const {
  std::vector<std::string> ins;
  for (const Tensor& t : op().inputs) ins.push_back(t.describe());
  return fmt::format("op {} '{}' ({} from {})", index_, op().op, op().output.describe(), fmt::join(ins, ", "));
}

void OpContext::unsupported(const std::string& why) const {
  throw_error(ErrorCode::kUnimplemented, "export_onnx: {}: {}", describe(), why);
}

void OpContext::require_opset(int needed, const std::string& onnx_op) const {
  if (g.opset() >= needed) return;
  throw_error(ErrorCode::kUnimplemented,
              "export_onnx: {} has no ONNX form at opset {}: it needs {}, which opset {} has; export with --opset {} "
              "(or opset={} in OnnxExportOptions)",
              describe(), g.opset(), onnx_op, needed, needed, needed);
}

std::string OpContext::resolve(const std::vector<Tensor>& per_pass, const std::string& what) {
  if (!per_pass[0].defined()) return {};
  if (auto name = g.lookup(per_pass[0])) return *name;
  // Not produced by a traced op, not the input, not a parameter: a constant if every pass saw the
  // same values, else something computed from the input outside the ops, which ONNX cannot repeat.
  for (size_t p = 1; p < per_pass.size(); ++p) {
    if (!same_values(per_pass[0], per_pass[p])) {
      unsupported(fmt::format("its {} ({}) was built outside Tandem's ops and differs between traces ({} for input "
                              "{}): it was computed from the input or follows its size, so the exported model could "
                              "not compute it; build it with autograd ops",
                              what, per_pass[0].describe(), per_pass[p].shape().str(), passes_.inputs[p].shape().str()));
    }
  }
  std::string name = g.initializer(fmt::format("{}_{}_{}", op().op, index_, what), per_pass[0]);
  g.bind(per_pass[0], name);
  return name;
}

std::string OpContext::input(size_t i) {
  std::vector<Tensor> per_pass;
  for (size_t p = 0; p < passes_.passes(); ++p) per_pass.push_back(op(p).inputs[i]);
  return resolve(per_pass, "input" + std::to_string(i));
}

std::string OpContext::tensor_input(const std::string& attribute) {
  std::vector<Tensor> per_pass;
  for (size_t p = 0; p < passes_.passes(); ++p) per_pass.push_back(std::get<Tensor>(op(p).attributes.at(attribute)));
  return resolve(per_pass, attribute);
}

const autograd::TraceAttribute& OpContext::same_in_every_pass(const std::string& name) const {
  const autograd::TraceAttribute& first = op().attributes.at(name);
  for (size_t p = 1; p < passes_.passes(); ++p) {
    if (!same_attribute(op(p).attributes.at(name), first)) {
      unsupported(fmt::format("its {} changes with the size of the input ({} instead of {}), which its ONNX form "
                              "cannot follow; export with the input's axes fixed",
                              name, passes_.inputs[p].shape().str(), passes_.inputs[0].shape().str()));
    }
  }
  return first;
}

int64_t OpContext::integer(const std::string& name) const { return std::get<int64_t>(same_in_every_pass(name)); }
float OpContext::real(const std::string& name) const {
  return static_cast<float>(std::get<double>(same_in_every_pass(name)));
}
std::string OpContext::text(const std::string& name) const { return std::get<std::string>(same_in_every_pass(name)); }
std::vector<int64_t> OpContext::integers(const std::string& name) const {
  return std::get<std::vector<int64_t>>(same_in_every_pass(name));
}
const Tensor& OpContext::tensor(const std::string& name) const { return std::get<Tensor>(op().attributes.at(name)); }

std::vector<SymbolicDim> OpContext::solve_all(const std::vector<std::vector<int64_t>>& per_pass,
                                              const std::string& what) const {
  std::vector<SymbolicDim> dims;
  for (size_t i = 0; i < per_pass[0].size(); ++i) {
    std::vector<int64_t> sizes;
    for (const auto& values : per_pass) {
      if (values.size() != per_pass[0].size()) unsupported(fmt::format("its {} changes rank between traces", what));
      sizes.push_back(values[i]);
    }
    std::optional<SymbolicDim> d = passes_.solve(sizes);
    if (!d) {
      unsupported(fmt::format("its {} [{}] is not a product of the input's dynamic sizes (traces gave {}); export "
                              "with those axes fixed",
                              what, i, fmt::join(sizes, ", ")));
    }
    dims.push_back(*d);
  }
  return dims;
}

std::vector<SymbolicDim> OpContext::symbolic_list(const std::string& name) const {
  std::vector<std::vector<int64_t>> per_pass;
  for (size_t p = 0; p < passes_.passes(); ++p) per_pass.push_back(std::get<std::vector<int64_t>>(op(p).attributes.at(name)));
  return solve_all(per_pass, name);
}

SymbolicDim OpContext::symbolic(const std::string& name) const {
  std::vector<std::vector<int64_t>> per_pass;
  for (size_t p = 0; p < passes_.passes(); ++p) per_pass.push_back({std::get<int64_t>(op(p).attributes.at(name))});
  return solve_all(per_pass, name)[0];
}

std::vector<SymbolicDim> OpContext::output_shape() const {
  std::vector<std::vector<int64_t>> per_pass;
  for (size_t p = 0; p < passes_.passes(); ++p) per_pass.push_back(dims_of(op(p).output));
  return solve_all(per_pass, "output shape");
}

void OpContext::output(const std::string& value) { g.bind(op().output, value); }

void emit_op(OpContext& c) {
  std::vector<std::string> known;
  for (const EmitterTable* table : {&cnn_emitters(), &transformer_emitters()}) {
    if (auto it = table->find(c.op().op); it != table->end()) return it->second(c);
    for (const auto& entry : *table) known.push_back(entry.first);
  }
  c.unsupported(fmt::format("this op has no ONNX form in Tandem's exporter at any opset (the exportable ops: {}); "
                            "training-only ops (batchnorm, dropout, losses) mean the forward ran in training mode",
                            fmt::join(known, ", ")));
}

}  // namespace tandem::exporter::detail
