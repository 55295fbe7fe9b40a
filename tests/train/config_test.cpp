// The strict YAML config: defaults, every section read, and errors that give the key path,
// the line and a suggestion; --set overrides.
#include <gtest/gtest.h>

#include "engine/train/config.h"

namespace tandem::train {
namespace {

TrainConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  YAML::Node root = yaml::load(text, "test.yaml");
  for (const auto& o : overrides) yaml::apply_override(root, o);
  TrainConfig config;
  yaml::Keys keys;
  add_train_keys(config, keys);
  yaml::walk(root, "", keys);
  validate(config);
  return config;
}

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse(text, overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Config, ReadsEverySection) {
  TrainConfig c = parse(R"(
seed: 7
deterministic: true
device: cpu
devices: cpu:2
model: {name: resnet20, num_classes: 10, in_channels: 1, input_size: 28, channels_last: true}
train: {global_batch_size: 256, epochs: 3, label_smoothing: 0.1, clip_grad_norm: 5}
optimizer: {name: sgd, lr: 0.2, momentum: 0.9, nesterov: true, weight_decay: 5e-4}
schedule: {name: multistep, milestones: [100, 200], gamma: 0.1, warmup_steps: 10}
checkpoint: {every_steps: 500, keep_last: 2, resume: auto}
distribute: {bucket_cap_mb: 10, watchdog_timeout_s: 60}
output: {tensorboard: false}
prepare: {source: fashion-mnist, output_dir: data/fmnist}
)");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_TRUE(c.deterministic);
  EXPECT_EQ(c.device.devices, "cpu:2");
  EXPECT_EQ(c.model.in_channels, 1);
  EXPECT_TRUE(c.model.channels_last);
  EXPECT_EQ(c.loop.global_batch_size, 256);
  EXPECT_FLOAT_EQ(c.loop.label_smoothing, 0.1f);
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 5e-4f);
  EXPECT_EQ(c.schedule.milestones, (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_DOUBLE_EQ(c.distribute.bucket_cap_mb, 10.0);
  EXPECT_FALSE(c.output.tensorboard);
  EXPECT_EQ(c.prepare.source, "fashion-mnist");
}

TEST(Config, DefaultsNeedOnlyABatchSize) {
  TrainConfig c = parse("train: {per_replica_batch_size: 32}");
  EXPECT_EQ(c.model.name, "resnet20");
  EXPECT_EQ(c.optimizer.name, "sgd");
  EXPECT_EQ(c.device.device, "auto");
  EXPECT_EQ(c.checkpoint.keep_last, 3);
  // 0 keeps every checkpoint, as docs/CONFIG.md and CheckpointManager say; negative is refused.
  EXPECT_EQ(parse("train: {per_replica_batch_size: 32}\ncheckpoint: {keep_last: 0}").checkpoint.keep_last, 0);
  EXPECT_NE(error_of("train: {per_replica_batch_size: 32}\ncheckpoint: {keep_last: -1}").find("checkpoint.keep_last"),
            std::string::npos);
}

TEST(Config, UnknownKeyGivesPathLineAndSuggestion) {
  std::string e = error_of("train:\n  global_bach_size: 64\n");
  EXPECT_NE(e.find("train.global_bach_size (line 2)"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'global_batch_size'"), std::string::npos) << e;
  e = error_of("optimiser: {lr: 0.1}\ntrain: {global_batch_size: 8}");
  EXPECT_NE(e.find("did you mean 'optimizer'"), std::string::npos) << e;
}

// Found by tests/fuzz/config_fuzz: YAML allows a list or a mapping as a key, which used to escape
// as yaml-cpp's own exception (no key, no line).
TEST(Config, AKeyThatIsNotANameIsAnErrorWithItsLine) {
  const std::string what = error_of("train:\n  ? [a, b]\n  : 3\n");
  EXPECT_NE(what.find("train (line 2"), std::string::npos) << what;
  EXPECT_NE(what.find("expected a key name"), std::string::npos) << what;
  EXPECT_NE(error_of("? {x: 1}\n: 2\n").find("expected a key name"), std::string::npos);
}

TEST(Config, ADuplicatedKeyIsRefusedNamingBothLines) {
  // yaml-cpp keeps both; the first (or the last) once won silently.
  std::string e = error_of("train:\n  global_batch_size: 8\n  epochs: 2\n  epochs: 3\n");
  EXPECT_NE(e.find("train.epochs (line 4): 'epochs' is given twice (first at line 3)"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\noptimizer: {lr: 0.1}\ntrain: {epochs: 2}\n");
  EXPECT_NE(e.find("'train' is given twice (first at line 1)"), std::string::npos) << e;
}

TEST(Config, WrongTypesAndBadValuesNameTheKey) {
  std::string e = error_of("train: {global_batch_size: many}");
  EXPECT_NE(e.find("train.global_batch_size (line 1): expected an integer, got 'many'"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 0}");
  EXPECT_NE(e.find("must be at least 1"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\noptimizer: {name: adam}");
  EXPECT_NE(e.find("optimizer.name (line 2): 'adam' is not one of sgd, adamw (did you mean 'adamw'?)"),
            std::string::npos)
      << e;
  e = error_of("train: {global_batch_size: 8}\ndevices: cpu:0");
  EXPECT_NE(e.find("devices (line 2)"), std::string::npos) << e;
  e = error_of("device: cpu\ntrain: {global_batch_size: 8}\ndevices: [1, 0, 1]");  // accepted once, GPUs unused
  EXPECT_NE(e.find("devices (line 3): GPU 1 is listed twice"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 1099511627776}");  // once std::bad_alloc with counting off
  EXPECT_NE(e.find("train.global_batch_size (line 1): 1099511627776 examples in one batch is more than the 16777216"),
            std::string::npos)
      << e;
  e = error_of("train: {global_batch_size: 8, per_replica_batch_size: 4}");
  EXPECT_NE(e.find("exactly one of global_batch_size or per_replica_batch_size (got both)"), std::string::npos) << e;
  e = error_of("train: [1, 2]");
  EXPECT_NE(e.find("train (line 1): expected a mapping"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8\n");
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
}

TEST(Config, SetOverridesAnyKeyAndSaysWhereItCameFrom) {
  TrainConfig c = parse("train: {global_batch_size: 64}\noptimizer: {lr: 0.1}",
                        {"optimizer.lr=0.4", "train.epochs=5", "devices=[0, 1]", "model.name=mlp", "model.hidden=[64, 32]"});
  EXPECT_FLOAT_EQ(c.optimizer.lr, 0.4f);
  EXPECT_EQ(c.loop.epochs, 5);
  EXPECT_EQ(c.device.devices, "[0,1]");
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{64, 32}));
  std::string e = error_of("train: {global_batch_size: 64}", {"train.epochs=-1"});
  EXPECT_NE(e.find("train.epochs (set on the command line): must be at least 1"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 64}", {"train.epoch=3"});
  EXPECT_NE(e.find("did you mean 'epochs'"), std::string::npos) << e;
  EXPECT_THROW(parse("train: {global_batch_size: 64}", {"no_equals_sign"}), Error);
}

TEST(Config, TransformerModelsTakeTheirReferencesKeys) {
  TrainConfig c = parse(
      "train: {global_batch_size: 8}\nmodel: {name: gpt, block_size: 64, vocab_size: 256, n_layer: 3, n_head: 4, "
      "n_embd: 96, dropout: 0.1, bias: false}");
  EXPECT_EQ(c.model.block_size, 64);
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.n_embd, 96);
  EXPECT_FALSE(c.model.bias);
  EXPECT_FLOAT_EQ(c.model.dropout, 0.1f);
  TrainConfig v = parse(
      "train: {global_batch_size: 8}\nmodel: {name: vit, image_size: 28, patch_size: 7, num_layers: 2, num_heads: 3, "
      "hidden_dim: 48, mlp_dim: 96, in_channels: 1}");
  EXPECT_EQ(v.model.input_size, 28);
  EXPECT_EQ(v.model.patch_size, 7);
  EXPECT_EQ(v.model.hidden_dim, 48);
  std::string e = error_of("train: {global_batch_size: 8}\nmodel:\n  name: resnet20\n  n_layer: 4\n");
  EXPECT_NE(e.find("model.n_layer (line 4): not a key of model 'resnet20' (gpt takes it)"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\nmodel: {name: vit, image_size: 28, input_size: 32}");
  EXPECT_NE(e.find("image_size and input_size name the same value"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\nmodel: {name: gpt, n_embd: 96}", {"model.patch_size=4"});
  EXPECT_NE(e.find("model.patch_size (set on the command line): not a key of model 'gpt' (vit takes it)"),
            std::string::npos)
      << e;
}

TEST(Config, ThreadsPerReplicaPinsTheCountAndOversubscriptionIsAWarning) {
  TrainConfig c = parse("device: cpu\ndevices: cpu:2\nthreads_per_replica: 3\ntrain: {global_batch_size: 8}");
  distribute::ReplicaPlanRequest request = plan_request(c);
  request.cores = 4;
  distribute::ReplicaPlan plan = distribute::plan_replicas(request);
  EXPECT_EQ(plan.threads_per_replica, 3);
  EXPECT_NE(plan.oversubscribed_warning.find("threads_per_replica 3 x 2 replica(s) is 6 threads on 4 core(s)"),
            std::string::npos)
      << plan.oversubscribed_warning;
  request.cores = 8;
  EXPECT_TRUE(distribute::plan_replicas(request).oversubscribed_warning.empty());
  request.threads_per_replica = 0;  // the default: the cores over the replicas, never more
  EXPECT_EQ(distribute::plan_replicas(request).threads_per_replica, 4);
  std::string e = error_of("threads_per_replica: 5000\ntrain: {global_batch_size: 8}");
  EXPECT_NE(e.find("threads_per_replica (line 1): 5000 threads is more than the 1024"), std::string::npos) << e;
}

}  // namespace
}  // namespace tandem::train

namespace tandem::train {
namespace {

// Sizes read into narrower fields are bounded where they are read: model keys near 2^62 once
// overflowed a shape's element count (SIGSEGV), an out-of-range device count read "stoi", and
// cpu:200000000 built a 1.6 GB vector before any check.
TEST(ConfigTest, SizesAreBoundedWhereTheyAreRead) {
  std::string e = error_of("train: {global_batch_size: 8}\nmodel: {name: mlp, hidden: [4611686018427387904]}");
  EXPECT_NE(e.find("model.hidden[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("must be in [1, 16777216]"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\nmodel: {name: gpt, n_embd: 4611686018427387904}");
  EXPECT_NE(e.find("model.n_embd (line 2): must be in [1, 16777216]"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\nmodel: {name: resnet20, num_classes: 4611686018427387904}");
  EXPECT_NE(e.find("model.num_classes (line 2)"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\ndevices: '99999999999'");
  EXPECT_EQ(e.find("stoi"), std::string::npos) << e;
  EXPECT_NE(e.find("a GPU count from 1 to 64"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\ndevices: cpu:200000000");
  EXPECT_NE(e.find("cpu:N needs a replica count from 1 to 1024"), std::string::npos) << e;
  e = error_of("train: {global_batch_size: 8}\ncheckpoint: {keep_last: 4294967297}");
  EXPECT_NE(e.find("checkpoint.keep_last (line 2): must be in [0, 1048576]"), std::string::npos) << e;
  EXPECT_EQ(parse("train: {global_batch_size: 8}\ndevices: cpu:2").device.devices, "cpu:2");
}

}  // namespace
}  // namespace tandem::train
