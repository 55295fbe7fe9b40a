// CheckpointManager: layout on disk, model and optimizer round trips that continue bitwise,
// metadata, keep_last, resume auto past damaged checkpoints, resume by path, strict loading.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>

#include "engine/train/checkpoint/checkpoint.h"
#include "tests/train/checkpoint_util.h"

namespace tandem::train {
namespace {

using testing::TempDir;

optim::OptimizerOptions sgd_options() {
  return {.name = "sgd", .lr = 0.05f, .weight_decay = 1e-4f, .momentum = 0.9f, .nesterov = true};
}

CheckpointMeta sample_meta(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.epoch = 2;
  m.replicas = {{{{"file", 3}, {"record", 17}, {"shuffle", {1, 2, 3}}}, {7, 9, 123456789012345ull}},
                {{{"file", 4}, {"record", 18}}, {7, 10, 5}}};
  m.config = "model: resnet20\noptimizer:\n  lr: 0.05\n";
  m.metrics = {{"train_loss", 0.25}, {"eval_top1", std::nan("")}};
  m.wall_time_s = 12.5;
  return m;
}

std::vector<std::string> names(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(p.filename().string());
  return out;
}

std::vector<std::string> temporaries(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with(".tmp-")) out.push_back(e.path().filename().string());
  }
  return out;
}

class CheckpointRoundTrip : public ::testing::TestWithParam<std::string> {};

// The proof that resume is exact: after load, one more step gives bitwise the weights and
// optimizer state of the run that never stopped.
TEST_P(CheckpointRoundTrip, LoadedRunContinuesBitwiseAsTheOriginal) {
  TempDir dir;
  ExecutionContext ctx(Device::cpu(), 2);
  optim::OptimizerOptions options = sgd_options();
  options.name = GetParam();
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), options);
  for (int s = 0; s < 3; ++s) testing::train_step(ctx, *model, *optimizer, testing::random_batch(8, 100 + s));
  optimizer->set_lr(0.0375f);  // as a schedule would have moved it

  CheckpointManager manager(dir.path(), 0);
  std::filesystem::path saved = manager.save(*model, *optimizer, sample_meta(3));
  EXPECT_EQ(saved, dir / "step-00000003");

  auto restored = testing::small_model(2);  // different initial weights
  auto restored_optimizer = optim::make_optimizer(restored->named_parameters(), options);
  CheckpointMeta meta = CheckpointManager::load(saved, *restored, restored_optimizer.get());
  std::string difference;
  ASSERT_TRUE(testing::bitwise_equal(model->state_dict(), restored->state_dict(), &difference)) << difference;
  EXPECT_EQ(restored_optimizer->steps_taken(), 3);
  EXPECT_EQ(restored_optimizer->lr(), 0.0375f);
  EXPECT_EQ(meta.optimizer_steps, 3);
  EXPECT_EQ(meta.optimizer, GetParam());

  testing::Batch next = testing::random_batch(8, 200);
  testing::train_step(ctx, *model, *optimizer, next);
  testing::train_step(ctx, *restored, *restored_optimizer, next);
  EXPECT_TRUE(testing::bitwise_equal(model->state_dict(), restored->state_dict(), &difference)) << difference;
  EXPECT_TRUE(testing::bitwise_equal(optimizer->state_dict(), restored_optimizer->state_dict(), &difference))
      << difference;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointRoundTrip, ::testing::Values("sgd", "adamw"));

TEST(Checkpoint, LayoutNamesAndMetadataOnDisk) {
  TempDir dir;
  ExecutionContext ctx(Device::cpu(), 1);
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd_options());
  testing::train_step(ctx, *model, *optimizer, testing::random_batch(4, 1));
  CheckpointManager manager(dir.path(), 0);
  std::filesystem::path saved = manager.save(*model, *optimizer, sample_meta(1200));
  EXPECT_EQ(saved.filename(), "step-00001200");

  SafetensorsFile weights = read_safetensors(saved / "model.safetensors");
  EXPECT_EQ(weights.metadata.at("format"), "pt");
  for (const char* name : {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                           "1.num_batches_tracked", "4.weight", "4.bias"}) {
    EXPECT_TRUE(weights.tensors.contains(name)) << name;
  }
  EXPECT_EQ(weights.tensors.at("1.num_batches_tracked").dtype(), DType::kI64);
  EXPECT_TRUE(read_safetensors(saved / "optimizer.safetensors").tensors.contains("4.weight.momentum_buffer"));

  nlohmann::json j = nlohmann::json::parse(testing::read_bytes(saved / "meta.json"));
  EXPECT_EQ(j["format"], "tandem-checkpoint");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["step"], 1200);
  EXPECT_EQ(j["optimizer"]["name"], "sgd");
  EXPECT_EQ(j["optimizer"]["steps_taken"], 1);
  EXPECT_EQ(j["replicas"][0]["rng"]["offset"], 123456789012345ull);
  EXPECT_TRUE(j["metrics"]["eval_top1"].is_null());
  EXPECT_EQ(j["files"]["model.safetensors"]["bytes"], std::filesystem::file_size(saved / "model.safetensors"));

  CheckpointMeta meta = validate_checkpoint(saved);
  CheckpointMeta expected = sample_meta(1200);
  EXPECT_EQ(meta.epoch, 2);
  ASSERT_EQ(meta.replicas.size(), 2u);
  EXPECT_EQ(meta.replicas[0].data_position, expected.replicas[0].data_position);
  EXPECT_EQ(meta.replicas[1].rng.subsequence, 10u);
  EXPECT_EQ(meta.replicas[0].rng.offset, 123456789012345ull);
  EXPECT_EQ(meta.config, expected.config);
  EXPECT_EQ(meta.metrics.at("train_loss"), 0.25);
  EXPECT_TRUE(std::isnan(meta.metrics.at("eval_top1")));
  EXPECT_EQ(meta.wall_time_s, 12.5);
  EXPECT_EQ(meta.tandem_version, tandem_version());
  EXPECT_FALSE(meta.saved_at.empty());
}

TEST(Checkpoint, SavedBeforeTheFirstStepLoads) {
  TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd_options());
  CheckpointManager manager(dir.path(), 0);
  auto saved = manager.save(*model, *optimizer, sample_meta(0));
  auto other = testing::small_model(2);
  auto other_optimizer = optim::make_optimizer(other->named_parameters(), sgd_options());
  CheckpointManager::load(saved, *other, other_optimizer.get());
  EXPECT_TRUE(testing::bitwise_equal(model->state_dict(), other->state_dict()));
  EXPECT_EQ(other_optimizer->steps_taken(), 0);
}

TEST(Checkpoint, KeepLastKeepsTheNewestComplete) {
  TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd_options());
  CheckpointManager manager(dir.path(), 2);
  for (int step = 1; step <= 5; ++step) manager.save(*model, *optimizer, sample_meta(step * 100));
  EXPECT_EQ(names(manager.complete_checkpoints()), (std::vector<std::string>{"step-00000400", "step-00000500"}));
  EXPECT_TRUE(temporaries(dir.path()).empty());
  // A damaged checkpoint is neither counted nor removed; the newest is never removed.
  std::filesystem::create_directory(dir / "step-00000050");
  CheckpointManager one(dir.path(), 1);
  one.save(*model, *optimizer, sample_meta(600));
  EXPECT_EQ(names(one.complete_checkpoints()), (std::vector<std::string>{"step-00000600"}));
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000050"));
}

TEST(Checkpoint, SavingTheSameStepAgainReplacesIt) {
  TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd_options());
  CheckpointManager manager(dir.path(), 0);
  manager.save(*model, *optimizer, sample_meta(7));
  CheckpointMeta second = sample_meta(7);
  second.epoch = 9;
  manager.save(*model, *optimizer, second);
  EXPECT_EQ(validate_checkpoint(dir / "step-00000007").epoch, 9);
  EXPECT_TRUE(temporaries(dir.path()).empty());
}

TEST(Checkpoint, ResumeAutoSkipsDamagedNewestWithAWarningNamingIt) {
  TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd_options());
  CheckpointManager manager(dir.path(), 0);
  for (int step : {1, 2, 3, 4, 5}) manager.save(*model, *optimizer, sample_meta(step));
  // 5: one flipped bit in a tensor (every header still valid); 4: model file cut short; 3: meta.json
  // garbage; 2 fine. Also a stray temporary and a non-checkpoint.
  std::vector<uint8_t> bytes = testing::read_bytes(dir / "step-00000005" / "model.safetensors");
  bytes[bytes.size() - 2] ^= 0x04;
  testing::write_bytes(dir / "step-00000005" / "model.safetensors", bytes);
  std::filesystem::resize_file(dir / "step-00000004" / "model.safetensors", 100);
  testing::write_bytes(dir / "step-00000003" / "meta.json", {'{', 'x'});
  std::filesystem::create_directory(dir / ".tmp-step-00000006");
  std::filesystem::create_directory(dir / "step-notanumber");

  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  spdlog::default_logger()->sinks().push_back(sink);
  auto found = resolve_resume("auto", manager);
  spdlog::default_logger()->sinks().pop_back();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->filename(), "step-00000002");
  std::string log;
  for (const auto& line : sink->last_formatted()) log += line;
  EXPECT_NE(log.find("step-00000005"), std::string::npos) << log;
  EXPECT_NE(log.find("fails its checksum"), std::string::npos) << log;
  EXPECT_NE(log.find("step-00000004"), std::string::npos) << log;
  EXPECT_NE(log.find("step-00000003"), std::string::npos) << log;
  EXPECT_NE(log.find("model.safetensors"), std::string::npos) << log;
}

TEST(Checkpoint, ResumeSettings) {
  TempDir dir;
  CheckpointManager manager(dir / "checkpoints", 0);
  EXPECT_FALSE(resolve_resume("auto", manager).has_value());
  EXPECT_FALSE(resolve_resume("none", manager).has_value());
  EXPECT_FALSE(resolve_resume("", manager).has_value());
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd_options());
  auto saved = manager.save(*model, *optimizer, sample_meta(12));
  EXPECT_EQ(resolve_resume(saved.string(), manager), saved);
  try {
    resolve_resume((dir / "checkpoints").string(), manager);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("step-00000012"), std::string::npos) << e.what();
  }
  try {
    resolve_resume((dir / "nowhere").string(), manager);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("nowhere"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, StrictLoadNamesTheTensorAndTheFile) {
  TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd_options());
  CheckpointManager manager(dir.path(), 0);
  CheckpointMeta meta = sample_meta(1);
  meta.config = "model: {name: small_cnn, num_classes: 5}\n";
  auto saved = manager.save(*model, *optimizer, meta);

  auto wider = std::make_shared<nn::Sequential>();
  wider->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions{.in_channels = 1, .out_channels = 4, .padding = 1}));
  wider->push_back(std::make_shared<nn::BatchNorm2d>(4));
  wider->push_back(std::make_shared<nn::ReLU>());
  wider->push_back(std::make_shared<nn::Flatten>());
  wider->push_back(std::make_shared<nn::Linear>(4 * 6 * 6, 5));
  try {
    CheckpointManager::load(saved, *wider, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("'4.weight'"), std::string::npos) << message;
    EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find("the checkpoint holds a 'small_cnn' model"), std::string::npos) << message;
  }
  // A folder of checkpoints where one is expected (trainer eval --checkpoint RUN/checkpoints).
  try {
    CheckpointManager::load(dir.path(), *model, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("is a directory of checkpoints, not one checkpoint; name one, such as"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("step-00000001"), std::string::npos) << e.what();
  }
  auto adamw = optim::make_optimizer(model->named_parameters(), {.name = "adamw"});
  try {
    CheckpointManager::load(saved, *model, adamw.get());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("holds sgd optimizer state but the optimizer is adamw"), std::string::npos)
        << e.what();
  }
}

TEST(Checkpoint, MetaJsonThatDisagreesWithItsFilesIsDamaged) {
  TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd_options());
  CheckpointManager manager(dir.path(), 0);
  auto saved = manager.save(*model, *optimizer, sample_meta(5));
  // A valid safetensors file, but not the one meta.json recorded.
  write_safetensors(saved / "optimizer.safetensors", {{"x", Tensor::zeros({2})}});
  EXPECT_THROW(validate_checkpoint(saved), Error);
  // A directory whose name and meta.json disagree.
  std::filesystem::copy(dir / "step-00000005", dir / "step-00000006");
  try {
    validate_checkpoint(dir / "step-00000006");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  }
}

}  // namespace
}  // namespace tandem::train
