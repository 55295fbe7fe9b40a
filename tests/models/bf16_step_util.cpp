#include "tests/models/bf16_step_util.h"

#include <cmath>

#include "engine/autograd/ops.h"
#include "engine/core/random.h"
#include "tests/models/transformer_test_util.h"

namespace tandem::testing {

std::vector<models::ModelSpec> bf16_cases() {
  return {
      {.name = "resnet20", .num_classes = 10, .in_channels = 3, .input_size = 16, .channels_last = true},
      {.name = "resnet18", .num_classes = 7, .in_channels = 3, .input_size = 32},
      {.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 8, .hidden = {64, 32}},
      {.name = "small_cnn", .num_classes = 10, .in_channels = 1, .input_size = 28},
      {.name = "vit",
       .num_classes = 10,
       .in_channels = 3,
       .input_size = 16,
       .patch_size = 4,
       .num_layers = 2,
       .num_heads = 2,
       .hidden_dim = 32,
       .mlp_dim = 64},
      {.name = "gpt", .block_size = 16, .vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32},
  };
}

Inputs inputs_for(const models::ModelSpec& s) {
  const int64_t n = 4;
  if (s.name == "gpt") {
    return {random_ids({n, s.block_size}, s.vocab_size, 3), random_ids({n, s.block_size}, s.vocab_size, 4),
            n * s.block_size};
  }
  Generator g(5);
  Tensor x = Tensor::empty({n, s.in_channels, s.input_size, s.input_size});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g.normal();
  if (s.channels_last) x = x.to_format(MemoryFormat::kChannelsLast);
  return {x, random_ids({n}, s.num_classes, 6), n};
}

Step step_of(nn::Module& model, ExecutionContext& ctx, const Inputs& in) {
  for (auto& [name, p] : model.named_parameters()) p.zero_grad();
  const Tensor x = in.x.to(ctx.device()), labels = in.labels.to(ctx.device());
  autograd::Variable loss =
      autograd::cross_entropy_loss(ctx, model(ctx, autograd::Variable(x)), labels, 0.0f, in.divisor);
  loss.backward(&ctx);
  Step s{loss.value().to_vector()[0], {}};
  for (auto& [name, p] : model.named_parameters()) s.grads.push_back(p.grad().to_vector());
  return s;
}

double rel_norm(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    for (size_t j = 0; j < want[i].size(); ++j) {
      diff += std::pow(double{got[i][j]} - want[i][j], 2);
      norm += std::pow(double{want[i][j]}, 2);
    }
  }
  return std::sqrt(diff / norm);
}

void round_parameters_to_bf16(nn::Module& model) {
  for (auto& [name, p] : model.named_parameters()) {
    float* v = p.value().data<float>();
    for (int64_t i = 0; i < p.value().numel(); ++i) v[i] = bf16_to_float(float_to_bf16(v[i]));
  }
}

}  // namespace tandem::testing
