#include "engine/autograd/gradcheck.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/core/random.h"

namespace tandem::autograd {
namespace {

// sum(f(x) * weights) in double, from fresh copies of the inputs.
double projected(const std::function<Variable(const std::vector<Variable>&)>& f,
                 const std::vector<Tensor>& inputs, const std::vector<float>& weights) {
  std::vector<Variable> vars;
  for (const Tensor& t : inputs) vars.emplace_back(t.clone(), false);
  std::vector<float> y = f(vars).value().to(Device::cpu()).to_vector();
  double total = 0;
  for (size_t i = 0; i < y.size(); ++i) total += static_cast<double>(y[i]) * weights[i];
  return total;
}

}  // namespace

GradCheckResult check_gradients(ExecutionContext& ctx, const std::function<Variable(const std::vector<Variable>&)>& f,
                                const std::vector<Tensor>& inputs, const GradCheckOptions& options) {
  for (const Tensor& t : inputs) {
    TANDEM_CHECK(t.device().is_cpu() && t.dtype() == DType::kF32, ErrorCode::kInvalidArgument,
                 "check_gradients: inputs must be CPU f32 tensors, not {}", t.describe());
  }
  // Analytic: backward of sum(y * w) through the tape.
  std::vector<Variable> vars;
  for (const Tensor& t : inputs) vars.emplace_back(t.clone(), true);
  Variable y = f(vars);
  Generator g(options.seed);
  std::vector<float> weights(static_cast<size_t>(y.value().numel()));
  for (float& w : weights) w = g.uniform(-1, 1);
  Tensor w = Tensor::from_vector(weights, y.shape()).to_format(y.value().format()).to(y.value().device());
  Variable loss = sum(ctx, mul(ctx, y, Variable(w)));
  loss.backward(&ctx);

  GradCheckResult result;
  double worst_excess = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // In the input's memory order, the order the probes below perturb its elements in.
    std::vector<float> analytic(static_cast<size_t>(inputs[i].numel()), 0.0f);
    if (vars[i].has_grad()) {
      Tensor grad = vars[i].grad().to(Device::cpu()).to_format(inputs[i].format());
      std::copy_n(grad.data<float>(), grad.numel(), analytic.begin());
    }
    std::vector<Tensor> probe = inputs;
    for (int64_t e = 0; e < inputs[i].numel(); ++e) {
      probe[i] = inputs[i].clone();
      float* x = probe[i].data<float>();
      const float original = x[e];
      x[e] = static_cast<float>(original + options.eps);
      const double up = projected(f, probe, weights);
      x[e] = static_cast<float>(original - options.eps);
      const double down = projected(f, probe, weights);
      const double numeric = (up - down) / (2 * options.eps);
      const double error = std::fabs(analytic[static_cast<size_t>(e)] - numeric);
      const double excess = error - (options.atol + options.rtol * std::fabs(numeric));
      result.max_abs_error = std::max(result.max_abs_error, error);
      if (excess > worst_excess) {
        worst_excess = excess;
        result.worst = fmt::format("input {} element {}: analytic {:.6g}, numeric {:.6g}", i, e,
                                   analytic[static_cast<size_t>(e)], numeric);
      }
      if (excess > 0) result.ok = false;
    }
  }
  return result;
}

}  // namespace tandem::autograd
