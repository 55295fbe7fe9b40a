#include "engine/nn/init.h"

#include <cmath>

namespace tandem::nn::init {

Generator& generator() {
  thread_local Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { generator() = Generator(seed); }

int64_t fan_in(const Shape& w) {
  int64_t receptive = 1;
  for (int i = 2; i < w.rank(); ++i) receptive *= w[i];
  return w.rank() >= 2 ? w[1] * receptive : w[0];
}

int64_t fan_out(const Shape& w) {
  int64_t receptive = 1;
  for (int i = 2; i < w.rank(); ++i) receptive *= w[i];
  return w[0] * receptive;
}

namespace {

// Initial values are drawn on the host and copied to the tensor's device.
template <typename Draw>
void fill_host(Tensor& w, Draw draw) {
  Tensor host = Tensor::empty(w.shape(), DType::kF32, Device::cpu(), w.format());
  float* p = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i) p[i] = draw();
  w.copy_from(host.to(w.device()));
}

}  // namespace

void kaiming_normal_fan_out(Tensor& w) {
  normal(w, std::sqrt(2.0f / static_cast<float>(fan_out(w.shape()))));
}

void normal(Tensor& w, float std) {
  fill_host(w, [std] { return std * generator().normal(); });
}

void xavier_uniform(Tensor& w) {
  const auto fans = static_cast<float>(fan_in(w.shape()) + fan_out(w.shape()));
  uniform(w, std::sqrt(6.0f / fans));
}

void uniform(Tensor& w, float bound) {
  fill_host(w, [bound] { return generator().uniform(-bound, bound); });
}

void constant(Tensor& w, float value) {
  fill_host(w, [value] { return value; });
}

}  // namespace tandem::nn::init
