// The ONNX forms of the convolutional classifiers' ops, the pointwise and reducing ops, reshapes
// and matrix products.
#include <map>

#include "engine/export/onnx_ops.h"

namespace tandem::exporter::detail {
namespace {

// PyTorch's padding (top, left) is ONNX's pads (top, left, bottom, right) with both sides equal.
std::vector<int64_t> pads_of(const std::vector<int64_t>& padding) {
  return {padding[0], padding[1], padding[0], padding[1]};
}

void conv2d(OpContext& c) {
  std::vector<std::string> ins{c.input(0), c.input(1)};
  if (c.inputs() == 3) ins.push_back(c.input(2));
  auto w = c.op().inputs[1].shape().dims();
  c.output(c.g.add("Conv", ins,
                   {{"kernel_shape", std::vector<int64_t>{w[2], w[3]}}, {"strides", c.integers("stride")},
                    {"pads", pads_of(c.integers("padding"))}, {"dilations", c.integers("dilation")},
                    {"group", c.integer("groups")}}));
}

void batchnorm_inference(OpContext& c) {
  std::string y = c.g.add("BatchNormalization",
                          {c.input(0), c.input(1), c.input(2), c.tensor_input("running_mean"),
                           c.tensor_input("running_var")},
                          {{"epsilon", c.real("eps")}});
  c.output(c.integer("fuse_relu") != 0 ? c.g.add("Relu", {y}) : y);
}

void pool(OpContext& c, const std::string& onnx_op) {
  std::map<std::string, AttributeValue> attributes{{"kernel_shape", c.integers("kernel")},
                                                   {"strides", c.integers("stride")},
                                                   {"pads", pads_of(c.integers("padding"))}};
  if (onnx_op == "AveragePool") attributes["count_include_pad"] = c.integer("count_include_pad");
  c.output(c.g.add(onnx_op, {c.input(0)}, attributes));
}

void reduce(OpContext& c, const std::string& onnx_op) {
  const int64_t keepdims = c.has("keepdim") ? c.integer("keepdim") : 0;
  // A full sum (autograd::sum(x)) records no axes: every axis, down to a scalar.
  if (!c.has("axes")) {
    c.output(c.g.add(onnx_op, {c.input(0)}, {{"keepdims", keepdims}}));
  } else if (onnx_op == "ReduceSum") {  // axes became an input of ReduceSum at opset 13
    c.output(c.g.add(onnx_op, {c.input(0), c.g.constant_i64(c.integers("axes"))}, {{"keepdims", keepdims}}));
  } else {
    c.output(c.g.add(onnx_op, {c.input(0)}, {{"axes", c.integers("axes")}, {"keepdims", keepdims}}));
  }
}

// x W^T + b: Gemm for a batch of rows, MatMul with the weight transposed once for more dimensions.
void linear(OpContext& c) {
  std::string x = c.input(0), w = c.input(1);
  std::vector<std::string> ins{x, w};
  if (c.inputs() == 3) ins.push_back(c.input(2));
  if (c.op().inputs[0].rank() == 2) {
    c.output(c.g.add("Gemm", ins, {{"transB", int64_t{1}}}));
    return;
  }
  std::string& wt = c.g.memo("transpose:" + w);
  if (wt.empty()) wt = c.g.add("Transpose", {w}, {{"perm", std::vector<int64_t>{1, 0}}});
  std::string y = c.g.add("MatMul", {x, wt});
  c.output(c.inputs() == 3 ? c.g.add("Add", {y, ins[2]}) : y);
}

}  // namespace

const EmitterTable& cnn_emitters() {
  static const EmitterTable table = {
      {"conv2d", conv2d},
      {"batchnorm_inference", batchnorm_inference},
      {"max_pool2d", [](OpContext& c) { pool(c, "MaxPool"); }},
      {"avg_pool2d", [](OpContext& c) { pool(c, "AveragePool"); }},
      {"global_avg_pool", [](OpContext& c) { c.output(c.g.add("GlobalAveragePool", {c.input(0)})); }},
      {"relu", [](OpContext& c) { c.output(c.g.add("Relu", {c.input(0)})); }},
      {"add_relu", [](OpContext& c) { c.output(c.g.add("Relu", {c.g.add("Add", {c.input(0), c.input(1)})})); }},
      {"add", [](OpContext& c) { c.output(c.g.add("Add", {c.input(0), c.input(1)})); }},
      {"sub", [](OpContext& c) { c.output(c.g.add("Sub", {c.input(0), c.input(1)})); }},
      {"mul", [](OpContext& c) { c.output(c.g.add("Mul", {c.input(0), c.input(1)})); }},
      {"div", [](OpContext& c) { c.output(c.g.add("Div", {c.input(0), c.input(1)})); }},
      {"scale", [](OpContext& c) { c.output(c.g.add("Mul", {c.input(0), c.g.scalar_f32(c.real("alpha"))})); }},
      {"exp", [](OpContext& c) { c.output(c.g.add("Exp", {c.input(0)})); }},
      {"log", [](OpContext& c) { c.output(c.g.add("Log", {c.input(0)})); }},
      {"sqrt", [](OpContext& c) { c.output(c.g.add("Sqrt", {c.input(0)})); }},
      {"rsqrt", [](OpContext& c) { c.output(c.g.add("Reciprocal", {c.g.add("Sqrt", {c.input(0)})})); }},
      {"tanh", [](OpContext& c) { c.output(c.g.add("Tanh", {c.input(0)})); }},
      {"sigmoid", [](OpContext& c) { c.output(c.g.add("Sigmoid", {c.input(0)})); }},
      {"silu", [](OpContext& c) { c.output(c.g.add("Mul", {c.input(0), c.g.add("Sigmoid", {c.input(0)})})); }},
      {"abs", [](OpContext& c) { c.output(c.g.add("Abs", {c.input(0)})); }},
      {"sin", [](OpContext& c) { c.output(c.g.add("Sin", {c.input(0)})); }},
      {"cos", [](OpContext& c) { c.output(c.g.add("Cos", {c.input(0)})); }},
      {"sum", [](OpContext& c) { reduce(c, "ReduceSum"); }},
      {"mean", [](OpContext& c) { reduce(c, "ReduceMean"); }},
      {"amax", [](OpContext& c) { reduce(c, "ReduceMax"); }},
      {"reshape", [](OpContext& c) { c.output(c.g.add("Reshape", {c.input(0), c.g.shape_tensor(c.output_shape())})); }},
      {"linear", linear},
      {"matmul", [](OpContext& c) { c.output(c.g.add("MatMul", {c.input(0), c.input(1)})); }},
  };
  return table;
}

}  // namespace tandem::exporter::detail
