// The ONNX forms of the transformer's ops: GELU, softmax, masks, layout changes, slices and
// concatenations, layer norm, attention (also on a packed q/k/v projection) and embeddings.
#include <cmath>
#include <limits>
#include <map>

#include "engine/export/onnx_ops.h"

namespace tandem::exporter::detail {
namespace {

constexpr int64_t kOnnxBool = 9;  // onnx::TensorProto::BOOL, for Cast's `to`

// Exact GELU, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, or PyTorch's tanh approximation; ONNX has a
// Gelu operator only from opset 20.
void gelu(OpContext& c) {
  GraphBuilder& g = c.g;
  const std::string x = c.input(0);
  std::string inner;
  if (c.text("approximate") == "tanh") {
    const float k = std::sqrt(2.0f / static_cast<float>(M_PI));
    std::string cube = g.add("Mul", {g.add("Mul", {x, x}), x});
    std::string sum = g.add("Add", {x, g.add("Mul", {cube, g.scalar_f32(0.044715f)})});
    inner = g.add("Tanh", {g.add("Mul", {sum, g.scalar_f32(k)})});
  } else {
    inner = g.add("Erf", {g.add("Mul", {x, g.scalar_f32(static_cast<float>(M_SQRT1_2))})});
  }
  std::string half_x = g.add("Mul", {x, g.scalar_f32(0.5f)});
  c.output(g.add("Mul", {half_x, g.add("Add", {inner, g.scalar_f32(1.0f)})}));
}

void masked_fill(OpContext& c) {
  std::string mask = c.g.add("Cast", {c.tensor_input("mask")}, {{"to", kOnnxBool}});
  c.output(c.g.add("Where", {mask, c.g.scalar_f32(c.real("value")), c.input(0)}));
}

void permute(OpContext& c) {
  const int64_t rank = c.op().inputs[0].rank();
  std::vector<int64_t> perm = c.integers("perm");
  for (int64_t& d : perm) d = d < 0 ? d + rank : d;
  c.output(c.g.add("Transpose", {c.input(0)}, {{"perm", perm}}));
}

// x[..., start : start + length, ...] along one axis; start and length may follow the input's axes.
void narrow(OpContext& c) {
  GraphBuilder& g = c.g;
  const SymbolicDim start = c.symbolic("start"), length = c.symbolic("length");
  std::string starts = g.dim_tensor(start), ends;
  if (start.constant() && length.constant()) {
    ends = g.constant_i64({start.factor + length.factor});
  } else {
    ends = g.add("Add", {starts, g.dim_tensor(length)});
  }
  c.output(g.add("Slice", {c.input(0), starts, ends, g.constant_i64({c.integer("axis")})}));
}

void concat(OpContext& c) {
  std::vector<std::string> ins;
  for (size_t i = 0; i < c.inputs(); ++i) ins.push_back(c.input(i));
  c.output(c.g.add("Concat", ins, {{"axis", c.integer("axis")}}));
}

void layer_norm(OpContext& c) {
  c.require_opset(17, "LayerNormalization");
  const int64_t dims = c.integer("normalized_dims");
  const Tensor& x = c.op().inputs[0];
  size_t next = 1;
  std::string scale = c.integer("with_weight") != 0 ? c.input(next++) : std::string();
  if (scale.empty()) {  // LayerNormalization always scales: by ones, as elementwise_affine=False does not
    const std::vector<SymbolicDim> shape = c.output_shape();
    for (size_t d = shape.size() - static_cast<size_t>(dims); d < shape.size(); ++d) {
      if (!shape[d].constant()) c.unsupported("a layer norm without weight over a dynamic axis has no fixed Scale");
    }
    const auto d = x.shape().dims();
    Tensor ones = Tensor::empty(Shape(std::span<const int64_t>(d.end() - dims, d.end())));
    std::fill_n(ones.data<float>(), ones.numel(), 1.0f);
    scale = c.g.initializer("layer_norm_ones_" + std::to_string(c.g.graph().initializer_size()), ones);
  }
  std::vector<std::string> ins{c.input(0), scale};
  if (c.integer("with_bias") != 0) ins.push_back(c.input(next));
  c.output(c.g.add("LayerNormalization", ins, {{"axis", -dims}, {"epsilon", c.real("eps")}}));
}

// softmax(q k^T scale + mask) v on (B, H, T, D). The causal mask (aligned bottom-right, as
// backend::AttentionParams) compares row and column indices, so it follows the sequence's length. A
// query that may see no key (a row all masked, or causal with more queries than keys) gets zeros,
// as Tandem's kernels give it, where ONNX's Softmax of a row of -inf is NaN.
std::string causal_scores(OpContext& c, const std::string& q, const std::string& k, const std::string& scores) {
  GraphBuilder& g = c.g;
  std::string tq = g.add("Gather", {g.add("Shape", {q}), g.scalar_i64(2)}, {{"axis", int64_t{0}}});
  std::string tk = g.add("Gather", {g.add("Shape", {k}), g.scalar_i64(2)}, {{"axis", int64_t{0}}});
  std::string one = g.scalar_i64(1), zero = g.scalar_i64(0);
  std::string rows = g.add("Unsqueeze", {g.add("Range", {zero, tq, one}), g.constant_i64({1})});  // (Tq, 1)
  std::string cols = g.add("Range", {zero, tk, one});                                             // (Tk)
  // Column j takes part in row i when j <= i + (Tk - Tq).
  std::string limit = g.add("Add", {rows, g.add("Sub", {tk, tq})});
  std::string blocked = g.add("Greater", {cols, limit});
  return g.add("Where", {blocked, g.scalar_f32(-std::numeric_limits<float>::infinity()), scores});
}

// The nodes of softmax(q k^T scale + mask) v on (B, H, T, D) values; the mask only where the op has one.
std::string attention_nodes(OpContext& c, const std::string& q, const std::string& k, const std::string& v) {
  GraphBuilder& g = c.g;
  if (c.real("dropout_p") != 0.0f) c.unsupported("attention dropout is on: the forward ran in training mode");
  std::string kt = g.add("Transpose", {k}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
  std::string scores = g.add("Mul", {g.add("MatMul", {q, kt}), g.scalar_f32(c.real("scale"))});
  const bool has_mask = c.has("mask") && c.tensor("mask").defined();
  if (has_mask) {
    std::string mask = c.tensor_input("mask");
    if (c.tensor("mask").dtype() == DType::kU8) {  // true takes part
      std::string keep = g.add("Cast", {mask}, {{"to", kOnnxBool}});
      scores = g.add("Where", {keep, scores, g.scalar_f32(-std::numeric_limits<float>::infinity())});
    } else {
      scores = g.add("Add", {scores, mask});
    }
  }
  const bool masked = has_mask || c.integer("causal") != 0;
  if (c.integer("causal") != 0) scores = causal_scores(c, q, k, scores);
  std::string p = g.add("Softmax", {scores}, {{"axis", int64_t{-1}}});
  if (masked) p = g.add("Where", {g.add("IsNaN", {p}), g.scalar_f32(0.0f), p});
  return g.add("MatMul", {p, v});
}

void attention(OpContext& c) {
  TANDEM_CHECK(c.op().inputs[0].rank() == 4, ErrorCode::kInvalidArgument,
               "export_onnx: {}: attention takes (B, H, T, D)", c.describe());
  c.output(attention_nodes(c, c.input(0), c.input(1), c.input(2)));
}

// qkv (B, T, 3 H D) -> (B, T, 3, H, D) -> (3, B, H, T, D), q, k and v gathered from it, attention,
// and the heads merged back: (B, H, T, D) -> (B, T, H, D) -> (B, T, H D). B and T may be dynamic.
void packed_self_attention(OpContext& c) {
  GraphBuilder& g = c.g;
  TANDEM_CHECK(c.op().inputs[0].rank() == 3, ErrorCode::kInvalidArgument,
               "export_onnx: {}: packed self-attention takes (B, T, 3 H D)", c.describe());
  const std::vector<SymbolicDim> out = c.output_shape();  // (B, T, H D)
  const int64_t heads = c.integer("heads"), d = c.op().inputs[0].dim(2) / (3 * heads);
  const std::vector<SymbolicDim> split{out[0], out[1], SymbolicDim{3, {}}, SymbolicDim{heads, {}}, SymbolicDim{d, {}}};
  std::string x = g.add("Reshape", {c.input(0), g.shape_tensor(split)});
  x = g.add("Transpose", {x}, {{"perm", std::vector<int64_t>{2, 0, 3, 1, 4}}});
  auto part = [&](int64_t i) { return g.add("Gather", {x, g.scalar_i64(i)}, {{"axis", int64_t{0}}}); };
  std::string q = part(0), k = part(1), v = part(2);
  std::string y = g.add("Transpose", {attention_nodes(c, q, k, v)}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  c.output(g.add("Reshape", {y, g.shape_tensor(out)}));
}

}  // namespace

const EmitterTable& transformer_emitters() {
  static const EmitterTable table = {
      {"gelu", gelu},
      {"softmax", [](OpContext& c) { c.output(c.g.add("Softmax", {c.input(0)}, {{"axis", c.integer("axis")}})); }},
      {"log_softmax",
       [](OpContext& c) { c.output(c.g.add("LogSoftmax", {c.input(0)}, {{"axis", c.integer("axis")}})); }},
      {"masked_fill", masked_fill},
      {"permute", permute},
      {"expand",
       [](OpContext& c) { c.output(c.g.add("Expand", {c.input(0), c.g.shape_tensor(c.symbolic_list("shape"))})); }},
      {"narrow", narrow},
      {"concat", concat},
      {"layer_norm", layer_norm},
      {"scaled_dot_product_attention", attention},
      {"packed_self_attention", packed_self_attention},
      {"embedding",
       [](OpContext& c) { c.output(c.g.add("Gather", {c.input(0), c.tensor_input("ids")}, {{"axis", int64_t{0}}})); }},
  };
  return table;
}

}  // namespace tandem::exporter::detail
