// Against PyTorch itself, where Debian's python3-torch is installed (skipped otherwise): torch loads
// our model.safetensors strictly into the same network and gives the same logits, and the state_dict
// it writes back in safetensors layout reads here bitwise equal to ours.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "engine/train/checkpoint/safetensors.h"
#include "tests/train/checkpoint_util.h"

namespace tandem::train {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

bool have_torch() {
  return std::system(fmt::format("{} -c 'import torch' >/dev/null 2>&1", kPython).c_str()) == 0;
}

TEST(SafetensorsTorch, PyTorchLoadsOurModelFileAndWritesOneWeRead) {
  if (!have_torch()) GTEST_SKIP() << "python3-torch is not installed";
  testing::TempDir dir;
  ExecutionContext ctx(Device::cpu(), 1);
  auto model = testing::small_model(3);
  auto optimizer = optim::make_optimizer(model->named_parameters(), {.name = "sgd", .lr = 0.1f});
  // Trained a little, so BatchNorm's running statistics and num_batches_tracked are not defaults.
  for (int s = 0; s < 2; ++s) testing::train_step(ctx, *model, *optimizer, testing::random_batch(8, 40 + s));
  model->eval();
  testing::Batch batch = testing::random_batch(4, 50);
  write_safetensors(dir / "model.safetensors", model->state_dict(), {{"format", "pt"}});
  write_safetensors(dir / "input.safetensors", {{"x", batch.x}});

  std::string command = fmt::format("{} {}/tests/train/safetensors_torch_check.py {} {} {}", kPython,
                                    TANDEM_SOURCE_DIR, (dir / "model.safetensors").string(),
                                    (dir / "input.safetensors").string(), (dir / "torch.safetensors").string());
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  SafetensorsFile from_torch = read_safetensors(dir / "torch.safetensors");
  EXPECT_EQ(from_torch.metadata.at("format"), "pt");
  std::vector<float> torch_logits = from_torch.tensors.at("logits").to_vector();
  from_torch.tensors.erase("logits");
  std::string difference;
  EXPECT_TRUE(testing::bitwise_equal(model->state_dict(), from_torch.tensors, &difference)) << difference;

  std::vector<float> ours = model->forward(ctx, autograd::Variable(batch.x)).value().to_vector();
  ASSERT_EQ(ours.size(), torch_logits.size());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(ours[i], torch_logits[i], 1e-4f) << "logit " << i;
}

}  // namespace
}  // namespace tandem::train
