// Helpers for the checkpoint tests (see checkpoint_util.h).
#include "tests/train/checkpoint_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "engine/nn/init.h"

namespace tandem::train::testing {

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void append(std::vector<uint8_t>& out, std::string_view text) { out.insert(out.end(), text.begin(), text.end()); }

void append_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::shared_ptr<nn::Sequential> small_model(uint64_t seed) {
  nn::init::manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions{.in_channels = 1, .out_channels = 4, .padding = 1}));
  m->push_back(std::make_shared<nn::BatchNorm2d>(4));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(4 * 6 * 6, 3));
  return m;
}

std::shared_ptr<nn::Sequential> large_model(int megabytes) {
  nn::init::manual_seed(1);
  auto m = std::make_shared<nn::Sequential>();
  // Each 512 x 1024 layer holds 2 MiB of f32 weights.
  for (int i = 0; i < std::max(1, megabytes / 2); ++i) m->push_back(std::make_shared<nn::Linear>(1024, 512));
  return m;
}

Batch random_batch(int n, uint64_t seed) {
  Generator g(seed);
  Batch b{Tensor::empty({n, 1, 6, 6}), Tensor::empty({n}, DType::kI64)};
  float* x = b.x.data<float>();
  for (int64_t i = 0; i < b.x.numel(); ++i) x[i] = g.normal();
  int64_t* y = b.labels.data<int64_t>();
  for (int i = 0; i < n; ++i) y[i] = static_cast<int64_t>(g.below(3));
  return b;
}

void train_step(ExecutionContext& ctx, nn::Module& model, optim::Optimizer& optimizer, const Batch& batch) {
  optimizer.zero_grad();
  autograd::Variable logits = model.forward(ctx, autograd::Variable(batch.x));
  autograd::Variable loss = autograd::cross_entropy_loss(ctx, logits, batch.labels, 0.0f, batch.x.dim(0));
  loss.backward(&ctx);
  optimizer.step(ctx);
}

bool bitwise_equal(const TensorMap& a, const TensorMap& b, std::string* difference) {
  auto differ = [&](const std::string& what) {
    if (difference != nullptr) *difference = what;
    return false;
  };
  if (a.size() != b.size()) return differ(fmt::format("{} tensors vs {}", a.size(), b.size()));
  for (const auto& [name, x] : a) {
    auto it = b.find(name);
    if (it == b.end()) return differ("'" + name + "' missing");
    const Tensor& y = it->second;
    if (!(x.shape() == y.shape()) || x.dtype() != y.dtype()) return differ("'" + name + "' shape or dtype");
    Tensor hx = x.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
    Tensor hy = y.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
    if (hx.nbytes() > 0 && std::memcmp(hx.raw_data(), hy.raw_data(), hx.nbytes()) != 0) {
      return differ("'" + name + "' values");
    }
  }
  return true;
}

}  // namespace tandem::train::testing
