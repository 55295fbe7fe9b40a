// A tour of the ops a libtorch user reaches for, written as with libtorch: tensor factories (randn,
// arange), a ModuleList trunk with SiLU, a ModuleDict of two heads, stack, std, tril, and the
// mse_loss and binary_cross_entropy_with_logits losses, trained together by AdamW. Returns 0 when
// both losses fell by half and the ops' checks hold.
//   ops_tour [STEPS]
#include <cmath>
#include <cstdio>
#include <string>

#include <tandem/nn.h>
#include <tandem/ops.h>
#include <tandem/optim.h>

namespace {

using tandem::ExecutionContext;
using tandem::autograd::Variable;
namespace ag = tandem::autograd;
namespace nn = tandem::nn;

// x (N, 8) -> a trunk of SiLU(Linear) blocks (8 -> 32 -> 16) -> {"value": (N, 1), "logit": (N, 1)}.
class TwoHeads : public nn::Module {
 public:
  TwoHeads() {
    blocks_ = register_module("blocks", std::make_shared<nn::ModuleList>());
    blocks_->push_back(std::make_shared<nn::Linear>(8, 32));
    blocks_->push_back(std::make_shared<nn::Linear>(32, 16));
    heads_ = register_module("heads", std::make_shared<nn::ModuleDict>());
    heads_->insert("value", std::make_shared<nn::Linear>(16, 1));
    heads_->insert("logit", std::make_shared<nn::Linear>(16, 1));
  }
  // Both heads stacked: (2, N, 1).
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    Variable h = x;
    for (const auto& block : *blocks_) h = ag::silu(ctx, block->forward(ctx, h));
    const Variable heads[] = {(*heads_)["value"].forward(ctx, h), (*heads_)["logit"].forward(ctx, h)};
    return ag::stack(ctx, heads, 0);
  }

 private:
  std::shared_ptr<nn::ModuleList> blocks_;
  std::shared_ptr<nn::ModuleDict> heads_;
};

bool check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 300;
  try {
    ExecutionContext ctx(tandem::Device::cpu(), /*threads=*/2, /*seed=*/7);
    // Inputs standardised by their own std; targets: a smooth value and a soft label.
    Variable raw(tandem::backend::randn(ctx, {128, 8}));
    const int rows[] = {0};
    Variable x = ag::div(ctx, raw, ag::std(ctx, raw, rows, 1, true));
    const int features[] = {1};
    Variable value = ag::sum(ctx, ag::sin(ctx, x), features, true);                    // (N, 1)
    Variable label = ag::sigmoid(ctx, ag::scale(ctx, ag::narrow(ctx, x, 1, 0, 1), 4.0f));  // (N, 1)

    bool ok = true;
    // tril of an arange square keeps the lower triangle: 0 + 1 + ... on and below the diagonal.
    Variable square = ag::reshape(ctx, Variable(tandem::backend::arange(ctx, 0, 16, 1, tandem::DType::kF32)), {4, 4});
    const float lower = ag::sum(ctx, ag::tril(ctx, square)).value().to_vector()[0];
    ok &= check(lower == 0 + 4 + 5 + 8 + 9 + 10 + 12 + 13 + 14 + 15, "tril keeps the lower triangle of arange(16)");

    tandem::nn::init::manual_seed(3);
    TwoHeads model;
    ok &= check(model.state_dict().count("heads.logit.weight") == 1, "state-dict names as PyTorch's");
    auto optimizer = tandem::optim::make_optimizer(model.named_parameters(), {.name = "adamw", .lr = 0.01f});
    float first_mse = 0, first_bce = 0, last_mse = 0, last_bce = 0;
    for (int step = 0; step < steps; ++step) {
      optimizer->zero_grad();
      Variable out = model.forward(ctx, x);  // (2, N, 1)
      Variable mse = ag::mse_loss(ctx, ag::reshape(ctx, ag::narrow(ctx, out, 0, 0, 1), {128, 1}), value);
      Variable bce = ag::binary_cross_entropy_with_logits(
          ctx, ag::reshape(ctx, ag::narrow(ctx, out, 0, 1, 1), {128, 1}), label);
      ag::add(ctx, mse, bce).backward(&ctx);
      optimizer->step(ctx);
      last_mse = mse.value().to_vector()[0];
      last_bce = bce.value().to_vector()[0];
      if (step == 0) {
        first_mse = last_mse;
        first_bce = last_bce;
      }
    }
    std::printf("loss: mse %.4f -> %.4f, bce %.4f -> %.4f over %d steps\n", first_mse, last_mse, first_bce, last_bce,
                steps);
    ok &= check(last_mse < 0.5f * first_mse, "the regression head's loss falls by half");
    // The soft labels' own entropy bounds BCE from below: measure the fall above it.
    const float floor = ag::binary_cross_entropy_with_logits(ctx, ag::scale(ctx, ag::narrow(ctx, x, 1, 0, 1), 4.0f), label)
                            .value()
                            .to_vector()[0];
    ok &= check(last_bce - floor < 0.5f * (first_bce - floor), "the classifier's loss falls by half above its floor");
    std::printf("done\n");
    return ok ? 0 : 1;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
