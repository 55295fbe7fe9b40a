// From one traced op to the ONNX nodes that compute it (internal to engine/export). OpContext is
// the op as traced in every pass; emit_op writes its nodes and binds its output.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/export/onnx_graph.h"
#include "engine/export/onnx_trace.h"

namespace tandem::exporter::detail {

class OpContext {
 public:
  OpContext(const TracePasses& passes, size_t index, GraphBuilder& graph) : g(graph), passes_(passes), index_(index) {}

  const autograd::TracedOp& op(size_t pass = 0) const { return passes_.tracers[pass].ops()[index_]; }
  size_t inputs() const { return op().inputs.size(); }
  // The value holding input i, or the tensor attribute `name`: a value of the graph, or a constant
  // when the trace holds one that is the same in every pass.
  std::string input(size_t i);
  std::string tensor_input(const std::string& attribute);

  bool has(const std::string& name) const { return op().attributes.count(name) != 0; }
  int64_t integer(const std::string& name) const;
  float real(const std::string& name) const;
  std::string text(const std::string& name) const;
  std::vector<int64_t> integers(const std::string& name) const;
  const Tensor& tensor(const std::string& name) const;
  // An integer or integers attribute (or the output's shape) as the input's axes determine it.
  SymbolicDim symbolic(const std::string& name) const;
  std::vector<SymbolicDim> symbolic_list(const std::string& name) const;
  std::vector<SymbolicDim> output_shape() const;

  void output(const std::string& value);  // the op's result is this value
  // Unimplemented unless the opset is at least `needed`.
  void require_opset(int needed, const std::string& onnx_op) const;
  [[noreturn]] void unsupported(const std::string& why) const;
  std::string describe() const;  // "op 12 'conv2d' (f32[2, 16, 8, 8] from f32[2, 3, 8, 8], ...)"

  GraphBuilder& g;

 private:
  std::string resolve(const std::vector<Tensor>& per_pass, const std::string& what);
  // The attribute as the first pass recorded it, after checking every pass recorded the same.
  const autograd::TraceAttribute& same_in_every_pass(const std::string& name) const;
  std::vector<SymbolicDim> solve_all(const std::vector<std::vector<int64_t>>& per_pass, const std::string& what) const;

  const TracePasses& passes_;
  size_t index_;
};

// Writes the op's nodes. Unimplemented for an op without an ONNX form (its name, and the opset that
// has one where a later opset does).
void emit_op(OpContext& c);

// Each traced op's name and the function that writes its nodes, in two tables by the ops they know
// (onnx_ops_cnn.cpp, onnx_ops_transformer.cpp); emit_op looks in both.
using Emitter = void (*)(OpContext&);
using EmitterTable = std::map<std::string, Emitter>;
const EmitterTable& cnn_emitters();
const EmitterTable& transformer_emitters();

}  // namespace tandem::exporter::detail
