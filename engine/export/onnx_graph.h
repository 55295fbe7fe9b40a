// Building an onnx.GraphProto from traced tensors (internal to engine/export): unique value names,
// initializers written from tensors, small constants, nodes with attributes, the tensors of the
// trace bound to the names of the values that hold them, and shape tensors computed from the
// graph input's dynamic axes.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/export/onnx_trace.h"

namespace tandem::exporter::detail {

using AttributeValue = std::variant<int64_t, float, std::string, std::vector<int64_t>>;

class GraphBuilder {
 public:
  GraphBuilder(onnx::GraphProto& graph, int opset, std::string input_name);

  int opset() const { return opset_; }
  onnx::GraphProto& graph() { return graph_; }

  // A node of op_type; returns the name of its (first) output, made fresh from the op type.
  std::string add(const std::string& op_type, const std::vector<std::string>& inputs,
                  const std::map<std::string, AttributeValue>& attributes = {}, int outputs = 1);
  // The name of the output `index` of the node add() made last.
  std::string last_output(int index) const;

  // Initializers: a tensor's values in logical (NCHW) order under `name`.
  std::string initializer(const std::string& name, const Tensor& value);
  std::string constant_i64(const std::vector<int64_t>& values);   // 1-D
  std::string scalar_f32(float value);                            // shape []
  std::string scalar_i64(int64_t value);                          // shape []

  // A tensor of the trace and the value holding it, found by its storage, shape and type.
  void bind(const Tensor& t, const std::string& name);
  std::optional<std::string> lookup(const Tensor& t);
  // A named tensor (a parameter or buffer) that becomes an initializer the first time it is used.
  void offer(const Tensor& t, const std::string& name);

  // A name remembered under `key` (a weight's transpose made once, say); empty the first time.
  std::string& memo(const std::string& key) { return memo_[key]; }

  // The 1-D int64 tensor [size] of a SymbolicDim, from the graph input's shape where it is dynamic.
  std::string dim_tensor(const SymbolicDim& d);
  // The 1-D int64 shape tensor of dims (one constant when none is dynamic).
  std::string shape_tensor(const std::vector<SymbolicDim>& dims);

 private:
  using Key = std::tuple<const void*, std::vector<int64_t>, DType>;
  static Key key_of(const Tensor& t);
  std::string fresh(const std::string& hint);

  onnx::GraphProto& graph_;
  int opset_;
  std::string input_name_;
  std::map<std::string, int> used_names_;
  std::map<Key, std::string> values_;
  std::map<Key, std::pair<std::string, Tensor>> offered_;
  std::map<std::pair<int64_t, std::vector<int>>, std::string> dims_;
  std::map<std::string, std::string> memo_;
  std::string input_shape_;
  onnx::NodeProto* last_ = nullptr;
};

}  // namespace tandem::exporter::detail
