// Text data on the trainer's side: `prepare: source: bible-kjv` (run for real where Debian's
// bible-kjv is installed, skipped visibly where not), its errors, a run config with data.tokens
// giving every replica batches of "tokens", and the whole path through the built `trainer`: a GPT
// trained on text, then `trainer eval` and `trainer generate` from its checkpoint.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/convert/text.h"
#include "data/example.h"
#include "data/pipeline/replica_pipeline.h"
#include "data/tfrecord_reader.h"
#include "engine/core/error.h"
#include "tests/support/temp_dir.h"
#include "tests/tools/trainer_cli_test_util.h"
#include "tools/trainer/prepare_data.h"
#include "tools/trainer/prepare_data_text.h"
#include "tools/trainer/train_setup.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;
using ::tandem::testing::TempDir;

template <typename F>
std::string error_of(F fn, ErrorCode code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

constexpr const char* kSmallGpt = "{name: gpt, block_size: 256, vocab_size: 256, n_layer: 1, n_head: 2, n_embd: 16}";

// A run config of token windows in dir (run.yaml); `extra` adds top-level sections.
RunConfig token_run_config(const TempDir& dir, int64_t length, const std::string& extra,
                           const std::string& model = kSmallGpt) {
  const std::string path = dir.file("run.yaml");
  std::ofstream(path) << fmt::format(R"(seed: 2
device: cpu
devices: cpu:2
model: {3}
train: {{global_batch_size: 8, epochs: 1}}
data:
  files: {0}/out/train-*.tfrecord
  shuffle_buffer: 0
  tokens: {{length: {1}, vocab_size: 256}}
eval_data:
  files: {0}/out/val-*.tfrecord
  tokens: {{length: {1}, vocab_size: 256}}
{2}
)",
                                     dir.path().string(), length, extra, model);
  return load_run_config(path, {});
}

// Every window of the files a pattern matches, file by file, as bytes.
std::vector<std::string> windows_of(const std::string& pattern) {
  std::vector<std::string> out;
  for (const std::string& file : data::resolve_files({pattern})) {
    data::TFRecordReader reader(file);
    std::string_view record;
    while (reader.next(&record)) {
      const data::FeatureMap features = data::parse_example(record);  // alive through the loop
      std::string bytes;
      for (int64_t t : features.at("tokens").ints) bytes += static_cast<char>(t);
      out.push_back(bytes);
    }
  }
  return out;
}

TEST(PrepareText, AMissingPackageSaysWhatToInstall) {
  const TextPackage* kjv = find_text_package("bible-kjv");
  ASSERT_NE(kjv, nullptr);
  EXPECT_EQ(kjv->program, "/usr/bin/bible");
  EXPECT_EQ(find_text_package("fashion-mnist"), nullptr);
  TempDir dir;
  TextPackage absent{.name = "bible-kjv", .program = dir.file("bin/bible"), .data = dir.file("lib/bible.data")};
  std::string msg = error_of([&] { extract_packaged_text(absent, dir.file("kjv.txt")); }, ErrorCode::kNotFound);
  EXPECT_NE(msg.find("apt-get install bible-kjv"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("bin/bible")), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir.file("kjv.txt")));
}

TEST(PrepareText, ConfigErrorsNameTheFix) {
  TempDir dir;
  std::string typo = error_of([&] { token_run_config(dir, 257, "prepare: {source: bibel-kjv}"); },
                              ErrorCode::kInvalidArgument);
  EXPECT_NE(typo.find("did you mean 'bible-kjv'"), std::string::npos) << typo;
  RunConfig images = token_run_config(dir, 257, "prepare: {source: fashion-mnist, output_dir: x}");
  std::string wrong = error_of([&] { ensure_data(images); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(wrong.find("makes image records, but data.tokens"), std::string::npos) << wrong;
  RunConfig none = token_run_config(dir, 257, "");
  std::string how = error_of([&] { ensure_data(none); }, ErrorCode::kNotFound);
  EXPECT_NE(how.find("trainer convert --source text --input TEXT.txt --block-size 256"), std::string::npos) << how;
  RunConfig small_vocab = token_run_config(dir, 257, "prepare: {source: bible-kjv, output_dir: x}");
  small_vocab.data.tokens->vocab_size = 100;
  std::string vocab = error_of([&] { ensure_data(small_vocab); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(vocab.find("data.tokens.vocab_size is 100: set it to 256"), std::string::npos) << vocab;
}

TEST(PrepareText, MakesTheKingJamesBibleOnceWhenInstalled) {
  const TextPackage& kjv = *find_text_package("bible-kjv");
  if (!fs::exists(kjv.program) || !fs::exists(kjv.data)) {
    GTEST_SKIP() << "Debian's bible-kjv is not installed (apt-get install bible-kjv): prepare is not run";
  }
  TempDir dir;
  RunConfig config = token_run_config(dir, 257, fmt::format("prepare: {{source: bible-kjv, output_dir: {}}}",
                                                            dir.file("out")));
  ensure_data(config);
  std::ifstream in(dir.file("out/bible-kjv.txt"), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n", 0), 0u);
  EXPECT_GT(text.size(), 4'000'000u);
  EXPECT_TRUE(text.ends_with("The grace of our Lord Jesus Christ be with you all. Amen.\n")) << "not the whole book";
  const size_t val_start = text.size() - static_cast<size_t>(std::llround(0.1 * static_cast<double>(text.size())));
  std::vector<std::string> val = windows_of(dir.file("out/val-*.tfrecord"));
  ASSERT_FALSE(val.empty());
  EXPECT_EQ(val.front(), text.substr(val_start, 257));  // validation: the end of the text, in order
  EXPECT_EQ(val.size(), (text.size() - val_start - 257) / 256 + 1);
  EXPECT_EQ(windows_of(dir.file("out/train-*.tfrecord")).size(), (val_start - 257) / 256 + 1);

  // A second run finds the files and writes nothing.
  const auto stamp = fs::last_write_time(dir.file("out/bible-kjv.txt"));
  ensure_data(config);
  EXPECT_EQ(fs::last_write_time(dir.file("out/bible-kjv.txt")), stamp);
  // Another block size than the files were made for stops before training.
  RunConfig longer = token_run_config(dir, 129, fmt::format("prepare: {{source: bible-kjv, output_dir: {}}}",
                                                            dir.file("out")));
  std::string msg = error_of([&] { ensure_data(longer); }, ErrorCode::kFailedPrecondition);
  EXPECT_NE(msg.find("windows of 257 tokens (block size 256), but data.tokens.length is 129"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("remove the TFRecords in " + dir.file("out")), std::string::npos) << msg;
}

TEST(TokenRunConfig, EveryReplicaGetsTokenBatches) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 400; ++i) text += fmt::format("line {} of a small text.\n", i);
  std::ofstream(dir.file("t.txt")) << text;
  data::TextConvertOptions o;
  o.inputs = {dir.file("t.txt")};
  o.block_size = 16;
  o.convert.output_dir = dir.file("out");
  o.convert.min_shards = 2;
  const data::TextConvertSummary s = data::convert_text(o);
  RunConfig config = token_run_config(dir, 17, "");
  ensure_data(config);  // the files are there: nothing to do
  const distribute::ReplicaPlan plan = plan_for(config.train);
  ASSERT_EQ(plan.replicas(), 2);
  int64_t steps = 0;
  auto sources = make_sources(config.data, plan, config.train, false, &steps);
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(steps, static_cast<int64_t>(s.train.windows.count / 2 / 4));
  Batch batch;
  for (auto& source : sources) {
    source->start_epoch(0);
    ASSERT_TRUE(source->next(batch));
    EXPECT_EQ(batch.describe(), "tokens i64[4, 17] cpu");
  }
}

TEST(TokenRunConfig, TokensAndTheModelMustAgreeBeforeAnyDataIsRead) {
  TempDir dir;
  std::string not_gpt = error_of(
      [&] { token_run_config(dir, 17, "", "{name: small_cnn, num_classes: 10, in_channels: 1, input_size: 28}"); },
      ErrorCode::kInvalidArgument);
  EXPECT_NE(not_gpt.find("data.tokens gives token windows, which model 'small_cnn' does not read"), std::string::npos)
      << not_gpt;
  token_run_config(dir, 17, "");  // a good config, written to run.yaml; each override below breaks it
  auto load = [&](std::vector<std::string> sets) { return load_run_config(dir.file("run.yaml"), sets); };
  std::string vocab = error_of([&] { load({"model.vocab_size=100"}); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(vocab.find("data.tokens.vocab_size 256 is larger than model.vocab_size 100"), std::string::npos) << vocab;
  std::string block = error_of([&] { load({"model.block_size=8"}); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(block.find("predicts 16 tokens per window, more than model.block_size 8"), std::string::npos) << block;
}

// A small text converted to windows of 17 tokens in dir/out.
void write_small_text(const TempDir& dir) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += fmt::format("line {} of a small text.\n", i);
  std::ofstream(dir.file("t.txt")) << text;
  data::TextConvertOptions o;
  o.inputs = {dir.file("t.txt")};
  o.block_size = 16;
  o.convert.output_dir = dir.file("out");
  data::convert_text(o);
}

TEST(TextEndToEnd, AGptTrainsThenEvalAndGenerateRunFromItsCheckpoint) {
  if (std::string reason = testing::cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  TempDir dir;
  write_small_text(dir);
  token_run_config(dir, 17, "optimizer: {name: adamw, lr: 0.01}");  // writes run.yaml
  const fs::path log = dir.path() / "train.txt";
  ASSERT_EQ(testing::run_trainer("--config " + dir.file("run.yaml") + " --run-dir " + dir.file("run"), log), 0)
      << testing::read_text(log);
  const std::string out = testing::read_text(log);
  EXPECT_NE(out.find("tokens/s (after warm-up)"), std::string::npos) << out;
  EXPECT_NE(out.find("perplexity"), std::string::npos) << out;
  EXPECT_NE(out.find("bits per byte"), std::string::npos) << out;
  EXPECT_NE(out.find("a sample of the trained model"), std::string::npos) << out;

  std::string checkpoint;
  for (const auto& entry : fs::directory_iterator(dir.path() / "run" / "checkpoints")) checkpoint = entry.path().string();
  ASSERT_FALSE(checkpoint.empty());
  const fs::path eval_log = dir.path() / "eval.txt";
  ASSERT_EQ(testing::run_trainer("eval --json --config " + dir.file("run.yaml") + " --checkpoint " + checkpoint,
                                 eval_log),
            0)
      << testing::read_text(eval_log);
  const std::string eval = testing::read_text(eval_log);
  EXPECT_NE(eval.find("\"data\": \"eval_data\""), std::string::npos) << eval;
  for (const char* metric : {"\"loss\"", "\"perplexity\"", "\"bits_per_byte\""}) {
    EXPECT_NE(eval.find(metric), std::string::npos) << metric << " in " << eval;
  }

  // Greedy generation: the same text twice, and the same without the key/value cache.
  auto generate = [&](const std::string& extra) {
    const fs::path gen_log = dir.path() / "generate.txt";
    EXPECT_EQ(testing::run_trainer("generate --checkpoint " + checkpoint +
                                       " --prompt 'line 1' --max-new-tokens 24 --temperature 0 " + extra,
                                   gen_log),
              0);
    // stdout's text, without the log lines (stderr, timestamped) that share the file
    std::string text, line;
    std::istringstream lines(testing::read_text(gen_log));
    while (std::getline(lines, line)) {
      if (!line.starts_with("[20")) text += line + "\n";
    }
    return text;
  };
  const std::string cached = generate("");
  EXPECT_TRUE(cached.starts_with("line 1")) << cached;
  EXPECT_GE(cached.size(), std::string("line 1").size() + 24) << cached;
  EXPECT_EQ(generate(""), cached);
  EXPECT_EQ(generate("--no-cache"), cached);
  const fs::path bad = dir.path() / "bad.txt";
  EXPECT_NE(testing::run_trainer("generate --checkpoint " + dir.file("nowhere") + " --prompt x", bad), 0);
  EXPECT_NE(testing::read_text(bad).find("nowhere"), std::string::npos) << testing::read_text(bad);
  // The prompt went to stdout before the checkpoint was refused.
  EXPECT_FALSE(testing::read_text(bad).starts_with("x")) << testing::read_text(bad);

  // `generate | head`: SIGPIPE is ignored (so training can save a checkpoint), and generate used to
  // go on for every one of its tokens after its reader left. It stops at the first failed write, as
  // a process SIGPIPE killed would (exit 141).
  const auto start = std::chrono::steady_clock::now();
  const std::string piped = fmt::format(
      "bash -c '{} generate --checkpoint {} --prompt x --max-new-tokens 1000000 --temperature 0 2>{} | head -c 16 "
      ">{}; exit ${{PIPESTATUS[0]}}'",
      testing::kTrainer, checkpoint, dir.file("head-stderr.txt"), dir.file("head.txt"));
  const int status = std::system(piped.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 141) << status << ": " << testing::read_text(dir.path() / "head-stderr.txt");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120));
  EXPECT_EQ(testing::read_text(dir.path() / "head.txt").size(), 16u);
}

}  // namespace
}  // namespace tandem::tools
