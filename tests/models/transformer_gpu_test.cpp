// GPT and ViT on cuda:0 against the same models on the CPU: the same weights and inputs give the
// same logits, loss and every parameter's gradient (f32, to the tolerance of differently ordered
// sums), a few AdamW steps keep them together, and generation on the GPU (with and without the
// key/value cache) gives the CPU's greedy tokens. Skips, with the reason, where the CUDA plugin is
// not loaded or sees no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/backend/plugin_loader.h"
#include "engine/core/random.h"
#include "engine/nn/init.h"
#include "engine/optim/optimizer.h"
#include "models/gpt.h"
#include "models/gpt_generate.h"
#include "models/registry.h"
#include "tests/models/transformer_test_util.h"
#include "tests/support/gpu.h"

namespace tandem::models {
namespace {

const Device kGpu = Device::cuda(0);

using testing::random_ids;
using testing::scaled_error;

// Two copies of one model, one moved to the GPU. weight_std > 0 redraws every parameter from
// N(0, weight_std): decisive logits, so greedy choices are not near-ties that rounding could flip.
struct Pair {
  std::shared_ptr<nn::Module> cpu, gpu;
};
Pair make_pair(const ModelSpec& spec, float weight_std = 0.0f) {
  nn::init::manual_seed(5);
  Pair p{create_model(spec), create_model(spec)};
  if (weight_std > 0.0f) {
    for (auto& [name, w] : p.cpu->named_parameters()) nn::init::normal(w.value(), weight_std);
  }
  p.gpu->load_state_dict(p.cpu->state_dict());
  p.gpu->to(kGpu);
  return p;
}

// Runs `steps` AdamW steps on both copies with the same batch, comparing loss and gradients each time.
void train_both(Pair& m, const Tensor& x, const Tensor& labels, int64_t divisor, int steps) {
  ExecutionContext cpu(Device::cpu(), 2, 1), gpu(kGpu, 0, 1);
  gpu.bind();
  const optim::OptimizerOptions adamw{.name = "adamw", .lr = 1e-3f, .weight_decay = 0.1f};
  auto opt_cpu = optim::make_optimizer(m.cpu->named_parameters(), adamw);
  auto opt_gpu = optim::make_optimizer(m.gpu->named_parameters(), adamw);
  Tensor x_gpu = x.to(kGpu), labels_gpu = labels.to(kGpu);
  for (int s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    opt_cpu->zero_grad();
    opt_gpu->zero_grad();
    autograd::Variable logits_cpu = m.cpu->forward(cpu, autograd::Variable(x));
    autograd::Variable logits_gpu = m.gpu->forward(gpu, autograd::Variable(x_gpu));
    EXPECT_LT(scaled_error(logits_gpu.value(), logits_cpu.value()), 2e-5) << "logits";
    autograd::Variable loss_cpu = autograd::cross_entropy_loss(cpu, logits_cpu, labels, 0.0f, divisor);
    autograd::Variable loss_gpu = autograd::cross_entropy_loss(gpu, logits_gpu, labels_gpu, 0.0f, divisor);
    loss_cpu.backward(&cpu);
    loss_gpu.backward(&gpu);
    const float want = loss_cpu.value().to_vector()[0];
    EXPECT_NEAR(loss_gpu.value().to(Device::cpu()).to_vector()[0], want, 1e-5 * std::max(1.0f, want)) << "loss";
    auto params_gpu = m.gpu->named_parameters();
    int compared = 0;
    for (auto& [name, p] : m.cpu->named_parameters()) {
      auto it = std::find_if(params_gpu.begin(), params_gpu.end(), [&](const auto& e) { return e.first == name; });
      ASSERT_NE(it, params_gpu.end()) << name;
      ASSERT_TRUE(it->second.has_grad()) << name;
      EXPECT_LT(scaled_error(it->second.grad(), p.grad()), 1e-4) << "gradient of " << name;
      ++compared;
    }
    EXPECT_EQ(compared, static_cast<int>(params_gpu.size()));  // every parameter (9 for one layer without biases)
    opt_cpu->step(cpu);
    opt_gpu->step(gpu);
  }
}

TEST(TransformerGpu, GptTrainsOnTheGpuAsOnTheCpu) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  // Head size 16 takes the tiled attention kernels; 3 steps of AdamW follow the CPU.
  Pair m = make_pair({.name = "gpt", .block_size = 32, .vocab_size = 61, .n_layer = 2, .n_head = 2, .n_embd = 32});
  train_both(m, random_ids({3, 29}, 61, 1), random_ids({3, 29}, 61, 2), 3 * 29, 3);
}

TEST(TransformerGpu, GptWithAnOddHeadSizeTakesTheUnfusedPathAndStillMatches) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  Pair m = make_pair({.name = "gpt", .block_size = 16, .vocab_size = 23, .n_layer = 1, .n_head = 3, .n_embd = 30,
                      .bias = false});
  train_both(m, random_ids({2, 13}, 23, 3), random_ids({2, 13}, 23, 4), 2 * 13, 2);
}

TEST(TransformerGpu, VitTrainsOnTheGpuAsOnTheCpu) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  Pair m = make_pair({.name = "vit", .num_classes = 5, .in_channels = 1, .input_size = 12, .patch_size = 4,
                      .num_layers = 2, .num_heads = 2, .hidden_dim = 32, .mlp_dim = 40});
  Generator g(6);
  Tensor x = Tensor::empty({4, 1, 12, 12});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g.normal();
  train_both(m, x, random_ids({4}, 5, 7), 4, 2);
}

// The loss as the language-modeling task computes it: the GPT's head fused with the cross-entropy,
// in chunks of `chunk_rows` rows (0: the default budget).
autograd::Variable fused_gpt_loss(ExecutionContext& ctx, nn::Module& model, const Tensor& x, const Tensor& labels,
                                  int64_t divisor, int64_t chunk_rows = 0) {
  auto& gpt = dynamic_cast<Gpt&>(model);
  autograd::LinearCrossEntropyOptions o;
  o.divisor = divisor;
  o.chunk_elements = chunk_rows * gpt.config().vocab_size;
  return autograd::linear_cross_entropy_loss(ctx, gpt.hidden_states(ctx, autograd::Variable(x)), gpt.head_weight(),
                                             labels, o);
}

TEST(TransformerGpu, GptTrainsInBf16OnTheTensorCoresAsInF32OnTheCpu) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  // Head size 64 under precision: bf16: packed attention on the tensor cores, bf16 products
  // everywhere, the fused classifier in chunks of 100 rows; 50 AdamW steps on one batch follow the
  // CPU's f32 losses (unfused) within bf16's rounding.
  const ModelSpec spec{.name = "gpt", .block_size = 64, .vocab_size = 96, .n_layer = 2, .n_head = 2, .n_embd = 128};
  Pair m = make_pair(spec);
  ExecutionContext cpu(Device::cpu(), 2, 1), gpu(kGpu, 0, 1);
  gpu.options().precision = Precision::kBf16;
  gpu.bind();
  const optim::OptimizerOptions adamw{.name = "adamw", .lr = 1e-3f, .weight_decay = 0.1f};
  auto opt_cpu = optim::make_optimizer(m.cpu->named_parameters(), adamw);
  auto opt_gpu = optim::make_optimizer(m.gpu->named_parameters(), adamw);
  const Tensor x = random_ids({4, 64}, 96, 8), labels = random_ids({4, 64}, 96, 9);
  const Tensor x_gpu = x.to(kGpu), labels_gpu = labels.to(kGpu);
  float first = 0.0f, last = 0.0f;
  for (int s = 0; s < 50; ++s) {
    opt_cpu->zero_grad();
    opt_gpu->zero_grad();
    autograd::Variable loss_cpu = autograd::cross_entropy_loss(cpu, m.cpu->forward(cpu, autograd::Variable(x)), labels,
                                                               0.0f, 4 * 64);
    autograd::Variable loss_gpu = fused_gpt_loss(gpu, *m.gpu, x_gpu, labels_gpu, 4 * 64, 100);
    loss_cpu.backward(&cpu);
    loss_gpu.backward(&gpu);
    opt_cpu->step(cpu);
    opt_gpu->step(gpu);
    const float want = loss_cpu.value().to_vector()[0], got = loss_gpu.value().to(Device::cpu()).to_vector()[0];
    EXPECT_NEAR(got, want, 2e-2 * std::max(1.0f, want)) << "step " << s;
    (s == 0 ? first : last) = want;
  }
  EXPECT_LT(last, 0.5f * first) << "the model did not learn its one batch";
}

// linear_cross_entropy_loss on the GPU, in one chunk and in uneven chunks, against the unfused ops
// on the CPU in f32; under bf16 within bf16's rounding. Two GPU runs give the same bits.
TEST(TransformerGpu, FusedClassifierMatchesTheUnfusedOpsOnTheCpu) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  Generator g(3);
  auto normal = [&](const Shape& shape, float std) {
    Tensor t = Tensor::empty(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std * g.normal();
    return t;
  };
  const Tensor x = normal({3, 100, 64}, 1.0f), w = normal({1000, 64}, 0.1f), labels = random_ids({3, 100}, 1000, 4);
  ExecutionContext cpu(Device::cpu(), 2, 1);
  autograd::Variable xc(x, true), wc(w, true);
  autograd::Variable want = autograd::cross_entropy_loss(cpu, autograd::linear(cpu, xc, wc, {}), labels, 0.1f, 300);
  want.backward(&cpu);
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    for (int64_t chunk_rows : {0, 97}) {
      SCOPED_TRACE(std::string(precision_name(precision)) + ", chunks of " + std::to_string(chunk_rows) + " rows");
      ExecutionContext gpu(kGpu, 0, 1);
      gpu.options().precision = precision;
      ContextBinding bind(gpu);
      auto run = [&] {
        autograd::Variable xg(x.to(kGpu), true), wg(w.to(kGpu), true);
        const autograd::LinearCrossEntropyOptions o{
            .label_smoothing = 0.1f, .divisor = 300, .chunk_elements = chunk_rows * 1000};
        autograd::Variable loss = autograd::linear_cross_entropy_loss(gpu, xg, wg, labels.to(kGpu), o);
        loss.backward(&gpu);
        return std::vector<Tensor>{loss.value(), xg.grad(), wg.grad()};
      };
      const std::vector<Tensor> got = run(), again = run();
      const double tolerance = precision == Precision::kBf16 ? 2e-2 : 1e-5;
      EXPECT_LT(scaled_error(got[0], want.value()), tolerance) << "loss";
      EXPECT_LT(scaled_error(got[1], xc.grad()), tolerance) << "dx";
      EXPECT_LT(scaled_error(got[2], wc.grad()), tolerance) << "dw";
      for (size_t i = 0; i < got.size(); ++i) {
        const std::vector<float> a = got[i].to(Device::cpu()).to_vector(), b = again[i].to(Device::cpu()).to_vector();
        EXPECT_EQ(a, b) << "output " << i << " differs between two runs";
      }
    }
  }
}

// The plugin counts every time the host waits for the GPU (tandem_cuda_host_synchronizations): a
// steady GPT step in bf16 adds none; reading the loss, as a log line does, adds one.
TEST(TransformerGpu, ASteadyGptStepNeverMakesTheHostWait) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  std::string error;
  const auto host_waits = backend::cuda_plugin_function<uint64_t (*)()>("tandem_cuda_host_synchronizations", &error);
  ASSERT_NE(host_waits, nullptr) << error;
  nn::init::manual_seed(5);
  auto model = create_model({.name = "gpt", .block_size = 128, .vocab_size = 96, .n_layer = 2, .n_head = 2,
                             .n_embd = 128});
  model->to(kGpu);
  ExecutionContext gpu(kGpu, 0, 1);
  gpu.options().precision = Precision::kBf16;
  gpu.bind();
  auto opt = optim::make_optimizer(model->named_parameters(), {.name = "adamw", .lr = 1e-3f, .weight_decay = 0.1f});
  const Tensor x = random_ids({4, 128}, 96, 1).to(kGpu), labels = random_ids({4, 128}, 96, 2).to(kGpu);
  autograd::Variable loss;
  auto step = [&] {
    opt->zero_grad();
    loss = fused_gpt_loss(gpu, *model, x, labels, 4 * 128, 200);  // three chunks, as the trainer's GPT-2
    loss.backward(&gpu);
    opt->step(gpu);
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: the allocator's cache fills, cuBLAS picks its plans
  gpu.stream().synchronize();
  const uint64_t before = host_waits();
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(host_waits() - before, 0u) << "host waits in 5 steady steps";
  EXPECT_TRUE(std::isfinite(loss.value().to(Device::cpu()).to_vector()[0]));
  EXPECT_EQ(host_waits() - before, 1u) << "reading the loss waits once";
}

TEST(TransformerGpu, GreedyGenerationOnTheGpuGivesTheCpusTokensWithAndWithoutTheCache) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  Pair m = make_pair({.name = "gpt", .block_size = 16, .vocab_size = 40, .n_layer = 2, .n_head = 2, .n_embd = 32},
                     0.3f);
  auto& cpu_model = dynamic_cast<Gpt&>(*m.cpu);
  auto& gpu_model = dynamic_cast<Gpt&>(*m.gpu);
  ExecutionContext cpu(Device::cpu(), 2, 1), gpu(kGpu, 0, 1);
  gpu.bind();
  const std::vector<int64_t> prompt{3, 1, 4, 1, 5};
  // 20 new tokens: the window slides past block_size, so the cache is rebuilt on the way.
  GenerateOptions greedy{.max_new_tokens = 20, .temperature = 0.0f};
  const std::vector<int64_t> want = generate(cpu, cpu_model, prompt, greedy);
  EXPECT_EQ(generate(gpu, gpu_model, prompt, greedy), want);
  greedy.use_cache = false;
  EXPECT_EQ(generate(gpu, gpu_model, prompt, greedy), want);
}

}  // namespace
}  // namespace tandem::models
