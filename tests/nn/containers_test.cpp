// ModuleList and ModuleDict: PyTorch's state-dict names for their children's parameters, a model
// that loops over them in its own forward, train/eval and to() reaching every child, and errors that
// name the index or key.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/nn/containers.h"
#include "engine/nn/layers.h"

namespace tandem::nn {
namespace {

// blocks: ModuleList of Linear(4, 4) x 3; heads: ModuleDict {"cls": Linear(4, 2), "reg": Linear(4, 1)}.
class Net : public Module {
 public:
  Net() {
    blocks_ = register_module("blocks", std::make_shared<ModuleList>());
    for (int i = 0; i < 3; ++i) blocks_->push_back(std::make_shared<Linear>(4, 4));
    heads_ = register_module("heads", std::make_shared<ModuleDict>());
    heads_->insert("cls", std::make_shared<Linear>(4, 2));
    heads_->insert("reg", std::make_shared<Linear>(4, 1));
  }
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    Variable h = x;
    for (const auto& block : *blocks_) h = autograd::relu(ctx, block->forward(ctx, h));
    return (*heads_)["cls"].forward(ctx, h);
  }
  std::shared_ptr<ModuleList> blocks_;
  std::shared_ptr<ModuleDict> heads_;
};

TEST(Containers, ParametersCarryPyTorchsStateDictNames) {
  Net net;
  std::vector<std::string> names;
  for (const auto& [name, p] : net.named_parameters()) names.push_back(name);
  const std::vector<std::string> want{"blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                                      "blocks.2.weight", "blocks.2.bias", "heads.cls.weight", "heads.cls.bias",
                                      "heads.reg.weight", "heads.reg.bias"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(net.state_dict().size(), want.size());
  EXPECT_EQ(net.blocks_->size(), 3u);
  EXPECT_EQ(net.heads_->keys(), (std::vector<std::string>{"cls", "reg"}));
  EXPECT_TRUE(net.heads_->contains("reg"));
  EXPECT_FALSE(net.heads_->contains("box"));
}

TEST(Containers, AModelLoopsOverItsListAndTrainsEveryChild) {
  Net net;
  ExecutionContext ctx(Device::cpu(), 1, 1);
  Variable x(Tensor::from_vector(std::vector<float>(8, 0.5f), {2, 4}));
  Variable loss = autograd::sum(ctx, net.forward(ctx, x));
  EXPECT_EQ(loss.shape(), Shape{});
  loss.backward(&ctx);
  for (const auto& [name, p] : net.named_parameters()) {
    EXPECT_EQ(p.has_grad(), name.rfind("heads.reg", 0) != 0) << name;  // reg is not in the graph
  }
  net.eval();
  EXPECT_FALSE(net.blocks_->operator[](2).is_training());
  EXPECT_FALSE((*net.heads_)["reg"].is_training());
}

TEST(Containers, ErrorsNameTheIndexOrKey) {
  Net net;
  ExecutionContext ctx(Device::cpu(), 1, 1);
  auto expect_error = [](const std::function<void()>& f, ErrorCode code, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "accepted; expected '" << part << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error([&] { (*net.blocks_)[3]; }, ErrorCode::kOutOfRange, "index 3 is out of range for 3 modules");
  expect_error([&] { (*net.heads_)["box"]; }, ErrorCode::kNotFound, "no module under key 'box'; its keys are [cls, reg]");
  expect_error([&] { net.heads_->insert("cls", std::make_shared<Linear>(4, 2)); }, ErrorCode::kInvalidArgument,
               "'cls' is registered twice");
  expect_error([&] { net.heads_->insert("a.b", std::make_shared<Linear>(4, 2)); }, ErrorCode::kInvalidArgument,
               "contain no '.'");
  Variable x(Tensor::zeros({1, 4}));
  expect_error([&] { net.blocks_->forward(ctx, x); }, ErrorCode::kFailedPrecondition, "ModuleList has no forward");
  expect_error([&] { net.heads_->forward(ctx, x); }, ErrorCode::kFailedPrecondition, "ModuleDict has no forward");
}

}  // namespace
}  // namespace tandem::nn
