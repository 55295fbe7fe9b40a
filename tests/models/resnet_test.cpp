// The model zoo against torchvision: state_dict names, dtypes and shapes of resnet18..152, and
// resnet18's logits with deterministic weights (fixtures from tools/scripts/make_torchvision_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/autograd/ops.h"
#include "engine/core/random.h"
#include "engine/core/suggest.h"
#include "engine/nn/init.h"
#include "models/registry.h"
#include "models/resnet.h"

namespace tandem::models {
namespace {

const std::string kFixtures = std::string(TANDEM_SOURCE_DIR) + "/tests/models/fixtures/";

struct Entry {
  std::string name, dtype, shape;
};

std::map<std::string, std::vector<Entry>> read_state_dict_fixture() {
  std::ifstream in(kFixtures + "torchvision_state_dicts.txt");
  EXPECT_TRUE(in.good()) << "missing fixture " << kFixtures << "torchvision_state_dicts.txt";
  std::map<std::string, std::vector<Entry>> models;
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Entry e;
    fields >> e.name >> e.dtype;
    if (e.name == "model") {
      current = e.dtype;
      continue;
    }
    fields >> e.shape;
    models[current].push_back(e);
  }
  return models;
}

std::string shape_text(const Tensor& t) {
  if (t.rank() == 0) return "scalar";
  std::string s;
  for (int i = 0; i < t.rank(); ++i) s += (i ? "x" : "") + std::to_string(t.dim(i));
  return s;
}

TEST(ResNet, StateDictMatchesTorchvisionNamesAndShapes) {
  auto expected = read_state_dict_fixture();
  ASSERT_EQ(expected.size(), 5u);
  for (const auto& [arch, entries] : expected) {
    auto model = create_model({.name = arch, .num_classes = 1000, .in_channels = 3, .input_size = 224});
    std::vector<Entry> ours;
    for (auto& [name, p] : model->named_parameters()) ours.push_back({name, "float32", shape_text(p.value())});
    // torchvision interleaves parameters and buffers per module; compare as sets of lines.
    std::map<std::string, std::string> ours_by_name, theirs_by_name;
    for (auto& [name, t] : model->state_dict()) {
      ours_by_name[name] = std::string(t.dtype() == DType::kI64 ? "int64" : "float32") + " " + shape_text(t);
    }
    for (const auto& e : entries) theirs_by_name[e.name] = e.dtype + " " + e.shape;
    EXPECT_EQ(ours_by_name, theirs_by_name) << arch;
  }
}

// The formula of make_torchvision_fixtures.py, in double precision then rounded to float.
Tensor deterministic_value(const std::string& name, const Shape& shape, int t) {
  Tensor out = Tensor::empty(shape);
  float* p = out.data<float>();
  int64_t n = shape.numel();
  for (int64_t i = 0; i < n; ++i) {
    double base = std::sin(0.001 * static_cast<double>(i) * (t + 1) + 0.5 * t);
    double v;
    if (name.ends_with("running_var")) {
      v = 0.5 + 0.25 * (base + 1);
    } else if (name.ends_with("running_mean") || name.ends_with("bias")) {
      v = 0.1 * base;
    } else if (shape.rank() >= 2) {
      v = base * std::sqrt(3.0 / static_cast<double>(n / shape[0]));
    } else {
      v = 1 + 0.1 * base;
    }
    p[i] = static_cast<float>(v);
  }
  return out;
}

// The state_dict order of torchvision (parameters and buffers interleaved per module).
std::vector<std::string> torchvision_order(const std::string& arch) {
  std::vector<std::string> names;
  auto fixture = read_state_dict_fixture();  // a named local: the loop below must not outlive it
  for (const auto& e : fixture[arch]) names.push_back(e.name);
  return names;
}

TEST(ResNet, Resnet18LogitsMatchTorchvision) {
  auto model = create_model({.name = "resnet18", .num_classes = 10, .in_channels = 3, .input_size = 64});
  std::map<std::string, Tensor> state = model->state_dict();
  int t = 0;
  for (const std::string& name : torchvision_order("resnet18")) {
    if (name.ends_with("num_batches_tracked")) continue;
    Shape shape = name == "fc.weight" ? Shape{10, 512} : (name == "fc.bias" ? Shape{10} : state.at(name).shape());
    state[name] = deterministic_value(name, shape, t++);
  }
  model->load_state_dict(state);
  model->eval();

  Shape x_shape{2, 3, 64, 64};
  Tensor x = Tensor::empty(x_shape);
  for (int64_t i = 0; i < x_shape.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i)));
  ExecutionContext ctx;
  autograd::NoGradGuard no_grad;
  std::vector<float> logits = model->forward(ctx, autograd::Variable(x)).value().to_vector();

  std::ifstream in(kFixtures + "resnet18_logits.txt");
  ASSERT_TRUE(in.good());
  std::vector<double> expected;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream values(line);
    double v;
    while (values >> v) expected.push_back(v);
  }
  ASSERT_EQ(expected.size(), logits.size());
  double max_abs = 0;
  for (double v : expected) max_abs = std::max(max_abs, std::fabs(v));
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(logits[i], expected[i], 1e-4 * max_abs + 1e-5) << "logit " << i;
  }
}

TEST(Registry, CifarResNetsHaveTheirDepthAndShapes) {
  for (auto [name, blocks] : std::vector<std::pair<std::string, int>>{{"resnet20", 3}, {"resnet56", 9}, {"resnet110", 18}}) {
    auto model = create_model({.name = name, .num_classes = 10, .in_channels = 1, .input_size = 28});
    auto state = model->state_dict();
    EXPECT_EQ(state.at("conv1.weight").shape(), Shape({16, 1, 3, 3})) << name;
    EXPECT_EQ(state.count("layer3." + std::to_string(blocks - 1) + ".conv2.weight"), 1u) << name;
    EXPECT_EQ(state.count("layer3." + std::to_string(blocks) + ".conv2.weight"), 0u) << name;
    EXPECT_EQ(state.at("layer2.0.downsample.0.weight").shape(), Shape({32, 16, 1, 1})) << name;
    EXPECT_EQ(state.at("fc.weight").shape(), Shape({10, 64})) << name;
  }
  int64_t params = 0;
  for (auto& p : create_model({.name = "resnet20", .num_classes = 10})->parameters()) params += p.value().numel();
  // He et al. report 0.27M for ResNet-20 with parameter-free shortcuts; projections add about 3k.
  EXPECT_NEAR(static_cast<double>(params), 272474.0, 5000.0);
}

TEST(Registry, ForwardShapesOnFashionMnistInput) {
  ExecutionContext ctx;
  autograd::NoGradGuard no_grad;
  Tensor x = Tensor::zeros({2, 1, 28, 28});
  for (std::string name : {"resnet20", "mlp", "small_cnn"}) {
    auto model = create_model({.name = name, .num_classes = 10, .in_channels = 1, .input_size = 28});
    model->eval();
    EXPECT_EQ(model->forward(ctx, autograd::Variable(x)).shape(), Shape({2, 10})) << name;
  }
}

// sum(block(x) * w) in double: the projection the gradient is checked through.
double projected(ExecutionContext& ctx, BasicBlock& block, const Tensor& x, const Tensor& w) {
  std::vector<float> y = block.forward(ctx, autograd::Variable(x.clone())).value().to_vector();
  std::vector<float> weights = w.to_vector();
  double total = 0;
  for (size_t i = 0; i < y.size(); ++i) total += static_cast<double>(y[i]) * weights[i];
  return total;
}

double central_difference(ExecutionContext& ctx, BasicBlock& block, const Tensor& x, const Tensor& w, int64_t e,
                          float eps) {
  Tensor probe = x.clone();
  float* p = probe.data<float>();
  const float original = p[e];
  p[e] = original + eps;
  double up = projected(ctx, block, probe, w);
  p[e] = original - eps;
  double down = projected(ctx, block, probe, w);
  return (up - down) / (2.0 * static_cast<double>(eps));
}

// A residual block's input gradient, whose two parts (the shortcut's and conv1's) are summed
// inside conv1's backward, against central differences: channels_last with 16 channels (oneDNN's
// blocked kernels) and 32 (its nhwc ones). The block's ReLUs have kinks that a step of 1e-3 can
// cross (batch norm moves a whole channel with one input); an element whose differences at three
// steps disagree sits on one and is left out, and most elements must be checked. (Two steps were
// not enough: a kink within a step of the point bends both differences alike, and element 3059 of
// the 32-channel case passed as 0.3615 and 0.3739 against an analytic 0.5240, with 0.3981 at 1e-3
// and 0.4576 at 5e-4 showing the kink.)
TEST(ResNet, BasicBlockInputGradientMatchesFiniteDifferences) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  for (int64_t c : {16, 32}) {
    nn::init::manual_seed(static_cast<uint64_t>(c));  // the same weights whichever tests ran before
    BasicBlock block(c, c, 1);
    Generator g(static_cast<uint64_t>(c));
    auto random = [&g](const Shape& s) {
      std::vector<float> v(static_cast<size_t>(s.numel()));
      for (float& f : v) f = g.uniform(-1, 1);
      return Tensor::from_vector(v, s).to_format(MemoryFormat::kChannelsLast);
    };
    Tensor x = random({2, c, 7, 7}), w = random({2, c, 7, 7});  // 7x7: the turned-around path
    autograd::Variable xv(x.clone(), true);
    autograd::Variable loss = autograd::sum(ctx, autograd::mul(ctx, block.forward(ctx, xv), autograd::Variable(w)));
    loss.backward(&ctx);
    Tensor analytic = xv.grad().to_format(MemoryFormat::kChannelsLast);
    int checked = 0, sampled = 0;
    for (int64_t e = 0; e < x.numel(); e += 23, ++sampled) {
      double coarse = central_difference(ctx, block, x, w, e, 4e-3f);
      double fine = central_difference(ctx, block, x, w, e, 2e-3f);
      double finer = central_difference(ctx, block, x, w, e, 1e-3f);
      auto differ = [](double a, double b) { return std::fabs(a - b) > 5e-3 + 2e-2 * std::fabs(b); };
      if (differ(coarse, fine) || differ(fine, finer)) continue;  // a kink
      ++checked;
      double a = analytic.data<float>()[e];
      EXPECT_NEAR(a, fine, 5e-3 + 2e-2 * std::fabs(fine)) << c << " channels, element " << e;
    }
    EXPECT_GE(checked * 4, sampled * 3) << c << " channels: only " << checked << " of " << sampled << " checked";
  }
}

TEST(Registry, UnknownNameSuggestsTheClosest) {
  try {
    create_model({.name = "resnet51"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'resnet50'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(create_model({.name = "resnet18", .input_size = 28}), Error);
  EXPECT_EQ(closest_match("global_bach_size", {"global_batch_size", "per_replica_batch_size"}), "global_batch_size");
  EXPECT_EQ(closest_match("zzz", {"global_batch_size"}), "");
}

}  // namespace
}  // namespace tandem::models
