#include "engine/export/onnx_graph.h"

#include <algorithm>

namespace tandem::exporter::detail {
namespace {

int onnx_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return onnx::TensorProto::FLOAT;
    case DType::kI64: return onnx::TensorProto::INT64;
    case DType::kI32: return onnx::TensorProto::INT32;
    case DType::kU8: return onnx::TensorProto::UINT8;
    case DType::kBF16: return onnx::TensorProto::BFLOAT16;
    default: break;
  }
  throw_error(ErrorCode::kUnimplemented, "export_onnx: no ONNX element type is wired for {} tensors",
              dtype_name(dtype));
}

void set_attribute(onnx::NodeProto& node, const std::string& name, const AttributeValue& value) {
  onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  if (const auto* i = std::get_if<int64_t>(&value)) {
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(*i);
  } else if (const auto* f = std::get_if<float>(&value)) {
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(*f);
  } else if (const auto* s = std::get_if<std::string>(&value)) {
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(*s);
  } else {
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : std::get<std::vector<int64_t>>(value)) a->add_ints(v);
  }
}

}  // namespace

GraphBuilder::GraphBuilder(onnx::GraphProto& graph, int opset, std::string input_name)
    : graph_(graph), opset_(opset), input_name_(std::move(input_name)) {
  used_names_[input_name_] = 1;
}

std::string GraphBuilder::fresh(const std::string& hint) {
  int& n = used_names_[hint];
  std::string name = hint;
  if (n > 0) {
    do {
      name = hint + "_" + std::to_string(n++);
    } while (used_names_.count(name) != 0);
    used_names_[name] = 1;
  } else {
    n = 1;
  }
  return name;
}

std::string GraphBuilder::add(const std::string& op_type, const std::vector<std::string>& inputs,
                              const std::map<std::string, AttributeValue>& attributes, int outputs) {
  onnx::NodeProto* node = graph_.add_node();
  node->set_op_type(op_type);
  node->set_name(fresh(op_type));
  for (const std::string& in : inputs) node->add_input(in);
  for (int i = 0; i < outputs; ++i) node->add_output(fresh(node->name() + "_out"));
  for (const auto& [name, value] : attributes) set_attribute(*node, name, value);
  last_ = node;
  return node->output(0);
}

std::string GraphBuilder::last_output(int index) const { return last_->output(index); }

std::string GraphBuilder::initializer(const std::string& name, const Tensor& value) {
  const Tensor host = value.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  onnx::TensorProto* t = graph_.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx_type(host.dtype()));
  for (int64_t d : host.shape().dims()) t->add_dims(d);
  t->set_raw_data(std::string(static_cast<const char*>(host.raw_data()), host.nbytes()));
  used_names_[name] = std::max(used_names_[name], 1);
  return name;
}

std::string GraphBuilder::constant_i64(const std::vector<int64_t>& values) {
  onnx::TensorProto* t = graph_.add_initializer();
  t->set_name(fresh("const_i64"));
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  return t->name();
}

std::string GraphBuilder::scalar_f32(float value) {
  onnx::TensorProto* t = graph_.add_initializer();
  t->set_name(fresh("const_f32"));
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_float_data(value);
  return t->name();
}

std::string GraphBuilder::scalar_i64(int64_t value) {
  onnx::TensorProto* t = graph_.add_initializer();
  t->set_name(fresh("const_i64"));
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_int64_data(value);
  return t->name();
}

GraphBuilder::Key GraphBuilder::key_of(const Tensor& t) {
  auto dims = t.shape().dims();
  return {t.raw_data(), std::vector<int64_t>(dims.begin(), dims.end()), t.dtype()};
}

void GraphBuilder::bind(const Tensor& t, const std::string& name) { values_[key_of(t)] = name; }

void GraphBuilder::offer(const Tensor& t, const std::string& name) { offered_.emplace(key_of(t), std::pair{name, t}); }

std::optional<std::string> GraphBuilder::lookup(const Tensor& t) {
  const Key key = key_of(t);
  if (auto it = values_.find(key); it != values_.end()) return it->second;
  if (auto it = offered_.find(key); it != offered_.end()) {  // written on its first use
    std::string name = initializer(it->second.first, it->second.second);
    values_[key] = name;
    return name;
  }
  return std::nullopt;
}

std::string GraphBuilder::dim_tensor(const SymbolicDim& d) {
  auto [it, inserted] = dims_.try_emplace({d.factor, d.axes});
  if (!inserted) return it->second;
  if (d.constant()) return it->second = constant_i64({d.factor});
  if (input_shape_.empty()) input_shape_ = add("Shape", {input_name_});
  std::string product;
  for (int axis : d.axes) {
    std::string size = add("Gather", {input_shape_, constant_i64({axis})}, {{"axis", int64_t{0}}});
    product = product.empty() ? size : add("Mul", {product, size});
  }
  if (d.factor != 1) product = add("Mul", {product, constant_i64({d.factor})});
  return it->second = product;
}

std::string GraphBuilder::shape_tensor(const std::vector<SymbolicDim>& dims) {
  std::vector<int64_t> constant;
  for (const SymbolicDim& d : dims) {
    if (!d.constant()) break;
    constant.push_back(d.factor);
  }
  if (constant.size() == dims.size()) return constant_i64(constant);
  std::vector<std::string> parts;
  for (const SymbolicDim& d : dims) parts.push_back(dim_tensor(d));
  return add("Concat", parts, {{"axis", int64_t{0}}});
}

}  // namespace tandem::exporter::detail
