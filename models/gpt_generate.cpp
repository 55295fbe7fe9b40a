#include "models/gpt_generate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/backend/ops.h"

namespace tandem::models {
namespace {

Tensor ids_tensor(const std::vector<int64_t>& ids, size_t begin, Device device) {
  Tensor t = Tensor::empty({1, static_cast<int64_t>(ids.size() - begin)}, DType::kI64);
  std::copy(ids.begin() + static_cast<std::ptrdiff_t>(begin), ids.end(), t.data<int64_t>());
  return t.to(device);
}

// The last position's logits, on the host.
std::vector<float> last_logits(ExecutionContext& ctx, const autograd::Variable& logits) {
  const Shape s = logits.shape();
  Tensor last = backend::narrow(ctx, logits.value(), 1, s[1] - 1, 1);
  return last.to(Device::cpu()).to_vector();
}

}  // namespace

int64_t sample_token(const std::vector<float>& logits, const GenerateOptions& o, Generator& g) {
  const int64_t v = static_cast<int64_t>(logits.size());
  if (o.temperature <= 0.0f) {
    return static_cast<int64_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<double> p(logits.begin(), logits.end());
  if (o.top_k > 0 && o.top_k < v) {
    std::vector<float> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const float kth = sorted[static_cast<size_t>(o.top_k - 1)];
    for (double& x : p) x = x < kth ? -std::numeric_limits<double>::infinity() : x;
  }
  const double m = *std::max_element(p.begin(), p.end());
  double sum = 0.0;
  for (double& x : p) sum += (x = std::exp((x - m) / o.temperature));
  double u = static_cast<double>(g.uniform()) * sum;
  for (int64_t i = 0; i < v; ++i) {
    u -= p[static_cast<size_t>(i)];
    if (u < 0.0) return i;
  }
  // Rounding left u at the end: the last token that had any probability.
  for (int64_t i = v - 1; i >= 0; --i) {
    if (p[static_cast<size_t>(i)] > 0.0) return i;
  }
  return 0;
}

std::vector<int64_t> generate(ExecutionContext& ctx, Gpt& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& o, const std::function<void(int64_t)>& on_token) {
  TANDEM_CHECK(!prompt.empty(), ErrorCode::kInvalidArgument, "generate: the prompt has no tokens");
  const int64_t block = model.config().block_size;
  autograd::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  Generator g(o.seed);
  std::vector<int64_t> ids = prompt, out;
  KvCache cache;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const size_t window_begin = ids.size() > static_cast<size_t>(block) ? ids.size() - static_cast<size_t>(block) : 0;
    autograd::Variable logits;
    if (!o.use_cache) {
      logits = model.forward(ctx, autograd::Variable(ids_tensor(ids, window_begin, ctx.device())));
    } else if (cache.length() > 0 && cache.length() < block && step > 0) {
      logits = model.forward(ctx, ids_tensor(ids, ids.size() - 1, ctx.device()), cache);  // one new position
    } else {
      // First step, or the window slid past block_size: the positions move, so the cache starts again.
      cache = KvCache();
      logits = model.forward(ctx, ids_tensor(ids, window_begin, ctx.device()), cache);
    }
    const int64_t next = sample_token(last_logits(ctx, logits), o, g);
    ids.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
  }
  model.train(was_training);
  return out;
}

}  // namespace tandem::models
