#include "engine/export/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/output_file.h"
#include "engine/core/version.h"
#include "engine/export/onnx_graph.h"
#include "engine/export/onnx_ops.h"
#include "engine/export/onnx_trace.h"

namespace tandem::exporter {
namespace {

using detail::SymbolicDim;

constexpr int64_t kIrVersion = 8;  // what opsets 13 to 17 pair with (ONNX 1.12's IR_VERSION)

std::string dim_name(const SymbolicDim& d, const OnnxInputSpec& spec) {
  std::vector<std::string> parts;
  if (d.factor != 1) parts.push_back(std::to_string(d.factor));
  for (int axis : d.axes) parts.push_back(spec.dynamic_axes.at(axis));
  return fmt::format("{}", fmt::join(parts, "*"));
}

void set_shape(onnx::ValueInfoProto& value, int elem_type, const std::vector<SymbolicDim>& dims,
               const OnnxInputSpec& spec) {
  value.mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
  auto* shape = value.mutable_type()->mutable_tensor_type()->mutable_shape();
  for (const SymbolicDim& d : dims) {
    if (d.constant()) {
      shape->add_dim()->set_dim_value(d.factor);
    } else {
      shape->add_dim()->set_dim_param(dim_name(d, spec));
    }
  }
}

std::vector<SymbolicDim> input_dims(const OnnxInputSpec& spec) {
  std::vector<SymbolicDim> dims;
  for (size_t a = 0; a < spec.shape.size(); ++a) {
    const int axis = static_cast<int>(a);
    dims.push_back(spec.dynamic_axes.count(axis) != 0 ? SymbolicDim{1, {axis}} : SymbolicDim{spec.shape[a], {}});
  }
  return dims;
}

std::vector<SymbolicDim> output_dims(const detail::TracePasses& t, const OnnxInputSpec& spec) {
  std::vector<SymbolicDim> dims;
  for (int a = 0; a < t.outputs[0].rank(); ++a) {
    std::vector<int64_t> sizes;
    for (const Tensor& out : t.outputs) sizes.push_back(out.rank() == t.outputs[0].rank() ? out.dim(a) : -1);
    std::optional<SymbolicDim> d = t.solve(sizes);
    TANDEM_CHECK(d.has_value(), ErrorCode::kUnimplemented,
                 "export_onnx: the model's output {} has a size along axis {} that is no product of input '{}''s "
                 "dynamic axes (traces gave {}); export with those axes fixed",
                 t.outputs[0].describe(), a, spec.name, fmt::join(sizes, ", "));
    dims.push_back(*d);
  }
  return dims;
}

std::string join_floats(const std::vector<float>& values) { return fmt::format("{}", fmt::join(values, ",")); }

void write_metadata(onnx::ModelProto& m, const OnnxInputSpec& spec) {
  std::map<std::string, std::string> props = spec.metadata;
  std::vector<std::string> shape;
  for (const SymbolicDim& d : input_dims(spec)) shape.push_back(d.constant() ? std::to_string(d.factor) : dim_name(d, spec));
  props["input_name"] = spec.name;
  props["input_shape"] = fmt::format("[{}]", fmt::join(shape, ","));
  props["input_layout"] = spec.layout;
  props["input_dtype"] = std::string(dtype_name(spec.dtype));
  if (!spec.mean.empty()) props["normalization_mean"] = join_floats(spec.mean);
  if (!spec.std.empty()) props["normalization_std"] = join_floats(spec.std);
  props["output_name"] = spec.output_name;
  for (const auto& [key, value] : props) {
    onnx::StringStringEntryProto* p = m.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  }
}

void build_graph(onnx::ModelProto& m, nn::Module& model, const OnnxInputSpec& spec, const OnnxExportOptions& options,
                 const detail::TracePasses& t) {
  onnx::GraphProto& graph = *m.mutable_graph();
  graph.set_name(options.graph_name);
  detail::GraphBuilder g(graph, options.opset, spec.name);
  set_shape(*graph.add_input(), spec.dtype == DType::kI64 ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT,
            input_dims(spec), spec);
  graph.mutable_input(0)->set_name(spec.name);
  g.bind(t.inputs[0], spec.name);
  for (auto& [name, p] : model.named_parameters()) g.offer(p.value(), name);
  for (auto& [name, b] : model.named_buffers()) g.offer(*b, name);
  for (size_t i = 0; i < t.tracers[0].ops().size(); ++i) {
    detail::OpContext c(t, i, g);
    detail::emit_op(c);
  }
  TANDEM_CHECK(t.outputs[0].dtype() == DType::kF32, ErrorCode::kUnimplemented,
               "export_onnx: the forward returns {}; the exporter writes f32 outputs", t.outputs[0].describe());
  for (const auto& [name, p] : model.named_parameters()) {
    TANDEM_CHECK(name != spec.output_name && name != spec.name, ErrorCode::kInvalidArgument,
                 "export_onnx: '{}' names a parameter of the model; give the input and output other names", name);
  }
  std::optional<std::string> result = g.lookup(t.outputs[0]);
  TANDEM_CHECK(result.has_value(), ErrorCode::kUnimplemented,
               "export_onnx: the forward's result {} was not computed by Tandem's ops (nothing in the trace made it)",
               t.outputs[0].describe());
  g.add("Identity", {*result});
  graph.mutable_node(graph.node_size() - 1)->set_output(0, spec.output_name);
  set_shape(*graph.add_output(), onnx::TensorProto::FLOAT, output_dims(t, spec), spec);
  graph.mutable_output(0)->set_name(spec.output_name);
}

// ONNX's own checker, then its shape inference in strict mode on a copy (which it annotates).
void check(const onnx::ModelProto& m) {
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto inferred = m;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, true));
  } catch (const std::exception& e) {
    throw_error(ErrorCode::kInternal, "export_onnx: ONNX's checker refused the exported model (a bug of Tandem's "
                                      "exporter; please report it with the model): {}", e.what());
  }
}

OnnxExportSummary summarize(const onnx::ModelProto& m, int opset) {
  OnnxExportSummary s;
  s.opset = opset;
  s.nodes = m.graph().node_size();
  s.initializers = m.graph().initializer_size();
  std::set<std::string> ops;
  for (const auto& n : m.graph().node()) ops.insert(n.op_type());
  s.onnx_ops.assign(ops.begin(), ops.end());
  for (const auto& t : m.graph().initializer()) {
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    s.parameters += n;
  }
  return s;
}

}  // namespace

std::string export_onnx_bytes(nn::Module& model, const OnnxInputSpec& input, const OnnxExportOptions& options,
                              OnnxExportSummary* summary) {
  TANDEM_CHECK(options.opset >= kMinOnnxOpset && options.opset <= kMaxOnnxOpset, ErrorCode::kInvalidArgument,
               "export_onnx: opset {} is outside {} to {} (the opsets of ONNX 1.12, which checks the file)",
               options.opset, kMinOnnxOpset, kMaxOnnxOpset);
  detail::TracePasses t = detail::trace_passes(model, input);
  onnx::ModelProto m;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("Tandem");
  m.set_producer_version(std::string(version()));
  onnx::OperatorSetIdProto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  build_graph(m, model, input, options, t);
  write_metadata(m, input);
  check(m);
  std::string bytes;
  TANDEM_CHECK(m.SerializeToString(&bytes), ErrorCode::kInternal, "export_onnx: protobuf could not serialize the model");
  if (summary != nullptr) {
    *summary = summarize(m, options.opset);
    summary->file_bytes = bytes.size();
  }
  return bytes;
}

OnnxExportSummary export_onnx(nn::Module& model, const OnnxInputSpec& input, const std::filesystem::path& path,
                              const OnnxExportOptions& options) {
  OnnxExportSummary summary;
  const std::string bytes = export_onnx_bytes(model, input, options, &summary);
  // A unique temporary beside the target, renamed over it (engine/core/output_file.h): a failed write
  // never leaves half a model, and a FIFO, device or symlink at the path is refused, not replaced.
  write_file_atomically(path, bytes, "export_onnx");
  return summary;
}

}  // namespace tandem::exporter
