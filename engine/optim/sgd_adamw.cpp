// The two optimizers, each a thin layer over its fused backend kernel, and the factory.
#include "engine/backend/ops.h"
#include "engine/core/suggest.h"
#include "engine/optim/optimizer.h"

namespace tandem::optim {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(NamedParameters params, const OptimizerOptions& o)
      : Optimizer(std::move(params), o, o.momentum != 0.0f ? std::vector<std::string>{"momentum_buffer"}
                                                            : std::vector<std::string>{}) {
    TANDEM_CHECK(o.momentum >= 0.0f && (!o.nesterov || (o.momentum > 0.0f && o.dampening == 0.0f)),
                 ErrorCode::kInvalidArgument,
                 "sgd: momentum {} must not be negative, and nesterov needs momentum > 0 and dampening 0 (got {})",
                 o.momentum, o.dampening);
  }

 private:
  void update(ExecutionContext& ctx, float weight_decay, const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
              const std::vector<std::vector<Tensor>>& state, const std::vector<Tensor>& w16) override {
    backend::SgdParams p;
    p.lr = options_.lr;
    p.momentum = options_.momentum;
    p.dampening = options_.dampening;
    p.weight_decay = weight_decay;
    p.nesterov = options_.nesterov;
    p.first_step = steps_ == 0;
    backend::sgd_update(ctx, p, w, dw, state.empty() ? std::vector<Tensor>{} : state[0], w16);
  }
};

class AdamW final : public Optimizer {
 public:
  AdamW(NamedParameters params, const OptimizerOptions& o)
      : Optimizer(std::move(params), o, {"exp_avg", "exp_avg_sq"}) {
    TANDEM_CHECK(o.beta1 >= 0.0f && o.beta1 < 1.0f && o.beta2 >= 0.0f && o.beta2 < 1.0f && o.eps > 0.0f,
                 ErrorCode::kInvalidArgument, "adamw: betas ({}, {}) must be in [0, 1) and eps {} positive", o.beta1,
                 o.beta2, o.eps);
  }

 private:
  void update(ExecutionContext& ctx, float weight_decay, const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
              const std::vector<std::vector<Tensor>>& state, const std::vector<Tensor>& w16) override {
    backend::AdamWParams p;
    p.lr = options_.lr;
    p.beta1 = options_.beta1;
    p.beta2 = options_.beta2;
    p.eps = options_.eps;
    p.weight_decay = weight_decay;
    p.step = steps_ + 1;
    backend::adamw_update(ctx, p, w, dw, state[0], state[1], w16);
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(NamedParameters params, const OptimizerOptions& options) {
  if (options.name == "sgd") return std::make_unique<Sgd>(std::move(params), options);
  if (options.name == "adamw") return std::make_unique<AdamW>(std::move(params), options);
  throw_error(ErrorCode::kInvalidArgument, "unknown optimizer '{}'{}: use sgd or adamw", options.name,
              did_you_mean(options.name, {"sgd", "adamw"}));
}

}  // namespace tandem::optim
