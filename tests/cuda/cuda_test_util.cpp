// The skip reason: first the driver (the usual absence), then the plugin's own status.
#include "tests/cuda/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/backend/plugin_loader.h"
#include "engine/backend/shared_library.h"

namespace tandem::testing {

std::string cuda_skip_reason() {
  backend::SharedLibrary driver("libcuda.so.1");
  if (!driver.loaded()) return "no CUDA driver: " + driver.error();
  driver.release();  // the plugin's runtime will use it; a driver is never unloaded
  const backend::CudaPluginStatus& status = backend::load_cuda_plugin();
  if (!status.loaded) return status.summary();
  if (status.device_count == 0) return "no GPU visible to the CUDA plugin";
  return {};
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi, MemoryFormat format) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape).to_format(format);
}

std::vector<float> host_values(const Tensor& t) {
  Tensor host = t.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  if (host.dtype() == DType::kF32) return host.to_vector();
  const auto* bits = static_cast<const BFloat16*>(host.raw_data());
  std::vector<float> out(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

double rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = host_values(got), w = host_values(want);
  EXPECT_EQ(g.size(), w.size());
  double diff = 0.0, scale = 1e-12;
  for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(g[i]) - w[i]));
    scale = std::max(scale, std::abs(static_cast<double>(w[i])));
  }
  return diff / scale;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = host_values(a), y = host_values(b);
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace tandem::testing
