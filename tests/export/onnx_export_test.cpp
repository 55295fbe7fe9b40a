// ONNX export of every built-in model, held to Tandem's own eval forward under onnxruntime itself
// (npm's onnxruntime-node), and to ONNX's checker and strict shape inference on the written file;
// the named errors of what cannot be exported faithfully.
#include <gtest/gtest.h>

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/export/onnx_export.h"
#include "models/registry.h"
#include "tests/support/files.h"
#include "tests/support/onnxruntime.h"
#include "tests/support/temp_dir.h"

namespace tandem::exporter {
namespace {

using autograd::Variable;

struct Case {
  std::string label;
  models::ModelSpec spec;
  OnnxInputSpec input;
  std::vector<int64_t> check_shape;  // another shape than the traced one: the axes are dynamic
};

OnnxInputSpec image_input(std::vector<int64_t> shape) {
  OnnxInputSpec in;
  in.shape = std::move(shape);
  return in;
}

models::ModelSpec image_spec(const std::string& name, int64_t channels, int64_t size) {
  models::ModelSpec s;
  s.name = name;
  s.in_channels = channels;
  s.input_size = size;
  s.hidden = {32, 16};
  return s;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  // The other depths (resnet32/44/56, resnet101/152) are these blocks in other counts.
  for (const char* name : {"resnet20", "resnet110", "resnet18", "resnet34", "resnet50"}) {
    all.push_back({name, image_spec(name, 3, 32), image_input({2, 3, 32, 32}), {3, 3, 32, 32}});
  }
  all.push_back({"mlp", image_spec("mlp", 1, 28), image_input({2, 1, 28, 28}), {5, 1, 28, 28}});
  all.push_back({"small_cnn", image_spec("small_cnn", 3, 16), image_input({2, 3, 16, 16}), {1, 3, 16, 16}});
  models::ModelSpec vit = image_spec("vit", 3, 32);
  vit.patch_size = 8, vit.num_layers = 2, vit.num_heads = 2, vit.hidden_dim = 32, vit.mlp_dim = 64;
  all.push_back({"vit", vit, image_input({2, 3, 32, 32}), {3, 3, 32, 32}});
  models::ModelSpec gpt;
  gpt.name = "gpt", gpt.block_size = 16, gpt.vocab_size = 50, gpt.n_layer = 2, gpt.n_head = 2, gpt.n_embd = 32;
  OnnxInputSpec tokens;
  tokens.name = "input_ids", tokens.dtype = DType::kI64, tokens.shape = {2, 8}, tokens.vocab_size = 50;
  tokens.dynamic_axes = {{0, "batch"}, {1, "sequence"}}, tokens.layout = "NT";
  all.push_back({"gpt", gpt, tokens, {3, 5}});
  return all;
}

Tensor random_tensor(const std::vector<int64_t>& dims, DType dtype, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::empty(Shape(std::span<const int64_t>(dims)), dtype);
  if (dtype == DType::kI64) {
    std::uniform_int_distribution<int64_t> id(0, vocab - 1);
    std::generate_n(t.data<int64_t>(), t.numel(), [&] { return id(rng); });
  } else {
    std::normal_distribution<float> normal;
    std::generate_n(t.data<float>(), t.numel(), [&] { return normal(rng); });
  }
  return t;
}

// Running statistics and affine parameters away from their initial 0 and 1 (and ViT's zeroed head
// away from 0), so that an export that dropped or misplaced them would show.
void randomize_batch_norms(nn::Module& model) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (auto& [name, buffer] : model.named_buffers()) {
    if (buffer->dtype() != DType::kF32) continue;
    const bool var = name.ends_with("running_var");
    std::generate_n(buffer->data<float>(), buffer->numel(), [&] { return var ? u(rng) : u(rng) - 1.0f; });
  }
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("bn") != std::string::npos || name.find("downsample.1") != std::string::npos ||
        name.find("ln") != std::string::npos || name.starts_with("heads.")) {
      std::generate_n(p.value().data<float>(), p.value().numel(), [&] { return u(rng) - 0.5f; });
    }
  }
}

onnx::ModelProto read_model(const std::filesystem::path& path) {
  onnx::ModelProto m;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << path;
  return m;
}

class OnnxExportModels : public ::testing::TestWithParam<Case> {};

TEST_P(OnnxExportModels, OnnxruntimeGivesTandemsEvalLogits) {
  if (std::string reason = testing::onnxruntime_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const Case& c = GetParam();
  auto model = models::create_model(c.spec);
  randomize_batch_norms(*model);
  testing::TempDir dir;
  const OnnxExportSummary summary = export_onnx(*model, c.input, dir / "model.onnx");
  EXPECT_TRUE(model->is_training()) << "the model's mode is restored after the trace";
  EXPECT_EQ(summary.opset, 17);
  EXPECT_GT(summary.nodes, 0);

  const Tensor x = random_tensor(c.check_shape, c.input.dtype, c.input.vocab_size, 11);
  model->eval();
  ExecutionContext ctx;
  const std::vector<float> ours = model->forward(ctx, Variable(x)).value().to_vector();
  const testing::OnnxRuntimeOutput theirs = testing::run_onnxruntime(dir / "model.onnx", c.input.name, x);
  ASSERT_EQ(theirs.values.size(), ours.size());
  EXPECT_EQ(theirs.dims[0], c.check_shape[0]);
  float largest = 0, worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    largest = std::max(largest, std::abs(ours[i]));
    worst = std::max(worst, std::abs(ours[i] - theirs.values[i]));
  }
  ASSERT_GT(largest, 0.0f);
  EXPECT_LE(worst, 1e-4f * largest) << c.label << ": largest logit " << largest << ", largest difference " << worst;
}

TEST_P(OnnxExportModels, TheFilePassesOnnxsCheckerAndStrictShapeInference) {
  const Case& c = GetParam();
  auto model = models::create_model(c.spec);
  testing::TempDir dir;
  export_onnx(*model, c.input, dir / "model.onnx");
  onnx::ModelProto m = read_model(dir / "model.onnx");
  EXPECT_NO_THROW(onnx::checker::check_model(m));
  EXPECT_NO_THROW(onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                                     onnx::ShapeInferenceOptions(true, 1, true)));
  // The output's batch axis is the input's, by name; the class (or vocabulary) axis a number.
  const auto& out = m.graph().output(0);
  EXPECT_EQ(out.name(), "logits");
  const auto& dims = out.type().tensor_type().shape().dim();
  EXPECT_EQ(dims[0].dim_param(), "batch");
  EXPECT_EQ(dims[dims.size() - 1].dim_value(), c.spec.name == "gpt" ? 50 : 10);
  if (c.spec.name == "gpt") {
    EXPECT_EQ(dims[1].dim_param(), "sequence");
  }
  // Eval form: nothing of training is left.
  for (const auto& node : m.graph().node()) EXPECT_NE(node.op_type(), "Dropout");
}

INSTANTIATE_TEST_SUITE_P(Registry, OnnxExportModels, ::testing::ValuesIn(cases()),
                         [](const auto& test) { return test.param.label; });

TEST(OnnxExport, MetadataCarriesTheInputsNameShapeLayoutAndNormalisation) {
  auto model = models::create_model(image_spec("small_cnn", 3, 16));
  OnnxInputSpec in = image_input({2, 3, 16, 16});
  in.mean = {0.5f, 0.25f, 0.125f};
  in.std = {0.2f, 0.3f, 0.4f};
  in.metadata["model"] = "small_cnn";
  testing::TempDir dir;
  export_onnx(*model, in, dir / "m.onnx");
  onnx::ModelProto m = read_model(dir / "m.onnx");
  std::map<std::string, std::string> props;
  for (const auto& p : m.metadata_props()) props[p.key()] = p.value();
  EXPECT_EQ(props["input_name"], "input");
  EXPECT_EQ(props["input_shape"], "[batch,3,16,16]");
  EXPECT_EQ(props["input_layout"], "NCHW");
  EXPECT_EQ(props["normalization_mean"], "0.5,0.25,0.125");
  EXPECT_EQ(props["normalization_std"], "0.2,0.3,0.4");
  EXPECT_EQ(props["model"], "small_cnn");
  EXPECT_EQ(m.producer_name(), "Tandem");
}

TEST(OnnxExport, GptsTiedEmbeddingIsOneInitializer) {
  models::ModelSpec gpt;
  gpt.name = "gpt", gpt.block_size = 8, gpt.vocab_size = 20, gpt.n_layer = 1, gpt.n_head = 1, gpt.n_embd = 8;
  auto model = models::create_model(gpt);
  OnnxInputSpec in;
  in.name = "input_ids", in.dtype = DType::kI64, in.shape = {1, 4}, in.vocab_size = 20;
  in.dynamic_axes = {{0, "batch"}, {1, "sequence"}};
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(export_onnx_bytes(*model, in)));
  int embeddings = 0;
  for (const auto& t : m.graph().initializer()) {
    embeddings += t.name() == "lm_head.weight" || t.name() == "transformer.wte.weight";
  }
  EXPECT_EQ(embeddings, 1);
}

TEST(OnnxExport, LayerNormBelowOpset17IsAnErrorNamingTheOpAndTheOpset) {
  models::ModelSpec vit = image_spec("vit", 3, 16);
  vit.patch_size = 8, vit.num_layers = 1, vit.num_heads = 1, vit.hidden_dim = 8, vit.mlp_dim = 8;
  auto model = models::create_model(vit);
  try {
    export_onnx_bytes(*model, image_input({1, 3, 16, 16}), {.opset = 16});
    FAIL() << "exported a layer norm at opset 16";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("'layer_norm'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("LayerNormalization, which opset 17 has"), std::string::npos) << e.what();
  }
  // The convolutional models need nothing past opset 13.
  auto cnn = models::create_model(image_spec("resnet20", 3, 16));
  OnnxExportSummary s;
  export_onnx_bytes(*cnn, image_input({1, 3, 16, 16}), {.opset = 13}, &s);
  EXPECT_EQ(s.opset, 13);
}

// A module whose op has no ONNX form: a custom op joined to the tape with make_op.
class CustomOpModel : public nn::Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    Tensor y = backend::scale(ctx, x.value(), 2.0f);
    return autograd::make_op("my_custom_op", y, {x}, [](const Tensor& dy) { return std::vector<Tensor>{dy}; });
  }
};

// A module that computes from its input outside the ops: nothing records it.
class UntracedModel : public nn::Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    Variable doubled(backend::scale(ctx, x.value(), 2.0f));
    return autograd::relu(ctx, doubled);
  }
};

TEST(OnnxExport, AnOpWithoutAnOnnxFormIsANamedError) {
  CustomOpModel custom;
  try {
    export_onnx_bytes(custom, image_input({2, 4}));
    FAIL() << "exported an op with no ONNX form";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("'my_custom_op'"), std::string::npos) << e.what();
  }
  UntracedModel untraced;
  try {
    export_onnx_bytes(untraced, image_input({2, 4}));
    FAIL() << "exported a value computed outside the ops as a constant";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("built outside Tandem's ops"), std::string::npos) << e.what();
  }
}

TEST(OnnxExport, BadSpecsAreRefusedBeforeTracing) {
  auto model = models::create_model(image_spec("mlp", 1, 4));
  EXPECT_THROW(export_onnx_bytes(*model, image_input({1, 1, 4, 4}), {.opset = 12}), Error);
  EXPECT_THROW(export_onnx_bytes(*model, image_input({1, 1, 4, 4}), {.opset = 18}), Error);
  OnnxInputSpec axis = image_input({1, 1, 4, 4});
  axis.dynamic_axes = {{4, "batch"}};
  EXPECT_THROW(export_onnx_bytes(*model, axis), Error);
  EXPECT_THROW(export_onnx_bytes(*model, image_input({})), Error);
  testing::TempDir dir;
  EXPECT_THROW(export_onnx(*model, image_input({1, 1, 4, 4}), dir / "missing" / "m.onnx"), Error);
  EXPECT_FALSE(std::filesystem::exists(dir / "missing"));
}

// The export's temporary was PATH.tmp, renamed over whatever PATH was: a FIFO or a device became a
// regular file (as root, --output /dev/null replaced /dev/null), and a symlink planted at PATH.tmp
// was followed. Only a new or regular file is replaced now, through a unique temporary.
TEST(OnnxExport, OnlyANewOrRegularFileIsReplaced) {
  auto model = models::create_model(image_spec("mlp", 1, 4));
  testing::TempDir dir;
  const std::filesystem::path fifo = dir / "fifo.onnx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  try {
    export_onnx(*model, image_input({1, 1, 4, 4}), fifo);
    FAIL() << "a FIFO must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("is a FIFO"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_THROW(export_onnx(*model, image_input({1, 1, 4, 4}), "/dev/null"), Error);
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
  EXPECT_THROW(export_onnx(*model, image_input({1, 1, 4, 4}), ""), Error);

  const std::filesystem::path victim = dir / "victim.txt";
  testing::write_file(victim, "keep me");
  std::filesystem::create_symlink(victim, dir / "m.onnx.tmp");
  export_onnx(*model, image_input({1, 1, 4, 4}), dir / "m.onnx");
  EXPECT_EQ(testing::read_file(victim), "keep me");
  EXPECT_GT(std::filesystem::file_size(dir / "m.onnx"), 100u);
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

}  // namespace
}  // namespace tandem::exporter
