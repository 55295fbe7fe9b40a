// `trainer predict`: a small_cnn trained here for two steps on generated RGB images classifies PNG
// and JPEG files, a folder and a TFRecord file; its probabilities must be the softmax of the
// checkpoint's eval-mode forward on the images preprocessed by hand (eval_data's mean and std, NCHW),
// and each kind of bad input must stop it with a message that names the input.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>

#include "data/example.h"
#include "data/pipeline/image_augment.h"
#include "data/pipeline/image_decode.h"
#include "data/tfrecord_reader.h"
#include "data/tfrecord_writer.h"
#include "engine/autograd/variable.h"
#include "engine/core/context.h"
#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/config.h"
#include "models/registry.h"
#include "tests/tools/trainer_cli_test_util.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;
using testing::kTrainer;

constexpr int kSize = 16;  // model.input_size
constexpr std::array<float, 3> kEvalMean{0.4f, 0.5f, 0.6f}, kEvalStd{0.3f, 0.25f, 0.2f};
constexpr std::array<float, 3> kTrainMean{0.5f, 0.4f, 0.3f}, kTrainStd{0.25f, 0.2f, 0.3f};

data::Image random_image(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  data::Image im;
  im.width = width;
  im.height = height;
  im.channels = 3;
  im.pixels.resize(static_cast<size_t>(width) * height * 3);
  for (uint8_t& v : im.pixels) v = static_cast<uint8_t>(rng() & 0xff);
  return im;
}

void write_file(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Two TFRecord files of 8 PNG images each, labels i % 4.
void write_records(const fs::path& dir) {
  for (int file = 0; file < 2; ++file) {
    data::TFRecordWriter writer((dir / fmt::format("train-{}.tfrecord", file)).string());
    for (int i = 0; i < 8; ++i) {
      data::FeatureMap f;
      f["image/encoded"] = data::Feature::of_bytes({data::encode_png(random_image(kSize, kSize, 100 + file * 8 + i))});
      f["image/class/label"] = data::Feature::of_ints({i % 4});
      writer.write(data::serialize_example(f));
    }
    writer.close();
  }
}

std::string image_section(const std::array<float, 3>& mean, const std::array<float, 3>& std, bool augment) {
  return fmt::format("{{height: {}, width: {}, channels: 3, normalize: true, mean: [{}], std: [{}], augment: "
                     "{{random_resized_crop: {}, horizontal_flip: {}}}}}",
                     kSize, kSize, fmt::join(mean, ", "), fmt::join(std, ", "), augment, augment);
}

// The run trains with random crops and flips and evaluates on other normalisation constants, so
// predicting with the wrong section, or with augmentation, gives other numbers.
std::string run_config(const fs::path& dir) {
  return fmt::format(R"(seed: 3
device: cpu
model: {{name: small_cnn, num_classes: 4, in_channels: 3, input_size: {}, channels_last: true}}
data:
  files: {}/train-*.tfrecord
  image: {}
eval_data:
  files: {}/train-*.tfrecord
  image: {}
train: {{global_batch_size: 8, epochs: 1}}
optimizer: {{name: sgd, lr: 0.05, momentum: 0.9}}
)",
                     kSize, dir.string(), image_section(kTrainMean, kTrainStd, true), dir.string(),
                     image_section(kEvalMean, kEvalStd, false));
}

// (v / 255 - mean[c]) / std[c] of an (H, W, 3) image, as (3, H, W).
std::vector<float> normalised_chw(const data::Image& im, const std::array<float, 3>& mean,
                                  const std::array<float, 3>& std) {
  std::vector<float> out(im.pixels.size());
  const size_t plane = static_cast<size_t>(im.width) * im.height;
  for (size_t p = 0; p < plane; ++p) {
    for (size_t c = 0; c < 3; ++c) out[c * plane + p] = (im.pixels[p * 3 + c] / 255.0f - mean[c]) / std[c];
  }
  return out;
}

std::vector<double> softmax(const std::vector<float>& z) {
  double top = *std::max_element(z.begin(), z.end()), sum = 0;
  std::vector<double> p;
  for (float v : z) p.push_back(std::exp(v - top));
  for (double v : p) sum += v;
  for (double& v : p) v /= sum;
  return p;
}

// The JSON lines of a log that holds stdout and stderr alike (the log lines start with '[').
std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("{")) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

class PredictCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kTrainer)) GTEST_SKIP() << "the trainer binary is not built: " << kTrainer;
    dir_ = fs::temp_directory_path() / fmt::format("tandem-predict-{}", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_records(dir_);
    std::ofstream(dir_ / "run.yaml") << run_config(dir_);
    ASSERT_EQ(testing::run_trainer(testing::train_args(dir_ / "run.yaml", dir_ / "run"), dir_ / "train.txt"), 0)
        << testing::read_text(dir_ / "train.txt");
    checkpoint_ = dir_ / "run" / "checkpoints" / "step-00000002";
    ASSERT_TRUE(fs::exists(checkpoint_ / "meta.json")) << testing::read_text(dir_ / "train.txt");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The checkpoint's model in eval mode, loaded here: the reference predict is held to.
  std::vector<float> reference_logits(const std::vector<float>& chw) {
    if (!model_) {
      const train::CheckpointMeta meta = train::validate_checkpoint(checkpoint_);
      model_ = models::create_model(train::model_config_from_text(meta.config));
      train::CheckpointManager::load(checkpoint_, *model_, nullptr);
      model_->eval();
    }
    ExecutionContext ctx(Device::cpu(), 1);
    autograd::NoGradGuard no_grad;
    Tensor x = Tensor::from_vector(chw, {1, 3, static_cast<int64_t>(chw.size() / 3 / kSize), kSize});
    return model_->forward(ctx, autograd::Variable(x)).value().to_vector();
  }

  // A copy of the checkpoint whose stored run config is changed by edit.
  fs::path edited_checkpoint(const std::string& name, const std::function<void(YAML::Node&)>& edit) {
    const fs::path copy = dir_ / name;
    fs::copy(checkpoint_, copy, fs::copy_options::recursive);
    nlohmann::json meta = nlohmann::json::parse(std::ifstream(copy / "meta.json"));
    YAML::Node config = YAML::Load(meta["config"].get<std::string>());
    edit(config);
    YAML::Emitter out;
    out << config;
    meta["config"] = std::string(out.c_str());
    std::ofstream(copy / "meta.json") << meta.dump();
    return copy;
  }

  int predict(const std::string& args, const std::string& log) {
    return testing::run_trainer(fmt::format("predict {}", args), dir_ / log);
  }

  // Runs predict and expects exit 1 with `message` in what it printed.
  void expect_error(const std::string& args, const std::string& message) {
    const std::string log = fmt::format("error-{}.txt", errors_++);
    EXPECT_EQ(predict(args, log), 1) << args;
    const std::string text = testing::read_text(dir_ / log);
    EXPECT_NE(text.find(message), std::string::npos) << "predict " << args << "\n" << text;
  }

  // Every line's probabilities against the reference: the top K classes, most probable first,
  // each the softmax of the reference logits; and the logits themselves.
  void expect_matches(const nlohmann::json& line, const std::vector<float>& chw, size_t k) {
    SCOPED_TRACE(line.dump());
    const std::vector<float> z = reference_logits(chw);
    const std::vector<double> p = softmax(z);
    ASSERT_EQ(line["top_k"].size(), k);
    std::vector<size_t> order(p.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    for (size_t i = 0; i < k; ++i) {
      EXPECT_EQ(line["top_k"][i]["class"].get<size_t>(), order[i]) << "rank " << i;
      EXPECT_NEAR(line["top_k"][i]["probability"].get<double>(), p[order[i]], 1e-5) << "rank " << i;
    }
    ASSERT_EQ(line["logits"].size(), z.size());
    for (size_t c = 0; c < z.size(); ++c) EXPECT_NEAR(line["logits"][c].get<double>(), z[c], 1e-4) << "class " << c;
  }

  fs::path dir_, checkpoint_;
  std::shared_ptr<nn::Module> model_;
  int errors_ = 0;
};

TEST_F(PredictCli, MatchesTheEvalForwardOnPngJpegFolderAndTFRecordInputs) {
  const data::Image a = random_image(kSize, kSize, 1), big = random_image(32, 24, 2);
  write_file(dir_ / "a.png", data::encode_png(a));
  const std::string jpeg = data::encode_jpeg(random_image(kSize, kSize, 3), 90);
  write_file(dir_ / "b.JPG", jpeg);
  fs::create_directories(dir_ / "folder");
  write_file(dir_ / "folder" / "d.png", data::encode_png(random_image(kSize, kSize, 5)));
  write_file(dir_ / "folder" / "c.png", data::encode_png(big));
  write_file(dir_ / "folder" / "notes.txt", "not an image, and not .jpg or .png: left alone");
  const fs::path records = dir_ / "train-1.tfrecord";
  const std::string inputs = fmt::format("--input {} {} {} --input {}", (dir_ / "a.png").string(),
                                         (dir_ / "b.JPG").string(), (dir_ / "folder").string(), records.string());
  // A batch of 3 puts images and records of different files in one forward pass.
  ASSERT_EQ(predict(fmt::format("--checkpoint {} {} --top-k 3 --batch-size 3 --json --logits", checkpoint_.string(),
                                inputs),
                    "json.txt"),
            0)
      << testing::read_text(dir_ / "json.txt");
  const std::string text = testing::read_text(dir_ / "json.txt");
  const std::vector<nlohmann::json> lines = json_lines(text);
  ASSERT_EQ(lines.size(), 4u + 8u) << text;

  EXPECT_EQ(lines[0]["input"], (dir_ / "a.png").string());
  EXPECT_FALSE(lines[0].contains("record"));
  EXPECT_FALSE(lines[0].contains("label"));
  expect_matches(lines[0], normalised_chw(a, kEvalMean, kEvalStd), 3);

  data::Image decoded;
  int num = 0, den = 0;
  data::decode_jpeg(jpeg, 3, 0, 0, &decoded, &num, &den);
  EXPECT_EQ(lines[1]["input"], (dir_ / "b.JPG").string());
  expect_matches(lines[1], normalised_chw(decoded, kEvalMean, kEvalStd), 3);

  // The folder's images by name: c.png (32 x 24, resized to the run's 16 x 16), then d.png.
  data::Image resized{std::vector<uint8_t>(kSize * kSize * 3), kSize, kSize, 3};
  data::resize_bilinear(big, data::CropBox{0, 0, 32, 24}, false, kSize, kSize, resized.pixels.data());
  EXPECT_EQ(lines[2]["input"], (dir_ / "folder" / "c.png").string());
  expect_matches(lines[2], normalised_chw(resized, kEvalMean, kEvalStd), 3);
  EXPECT_EQ(lines[3]["input"], (dir_ / "folder" / "d.png").string());
  expect_matches(lines[3], normalised_chw(random_image(kSize, kSize, 5), kEvalMean, kEvalStd), 3);

  for (int i = 0; i < 8; ++i) {
    const nlohmann::json& line = lines[static_cast<size_t>(4 + i)];
    EXPECT_EQ(line["input"], records.string());
    EXPECT_EQ(line["record"], i);
    EXPECT_EQ(line["label"], i % 4);
    expect_matches(line, normalised_chw(random_image(kSize, kSize, 108 + i), kEvalMean, kEvalStd), 3);
  }

  // The text form: one line per input, K classes each.
  ASSERT_EQ(predict(fmt::format("--checkpoint {} --input {} --top-k 2", checkpoint_.string(), records.string()),
                    "text.txt"),
            0);
  const std::string plain = testing::read_text(dir_ / "text.txt");
  EXPECT_NE(plain.find(records.string() + " record 7 (label 3): "), std::string::npos) << plain;
}

// Without eval_data the run's data section serves, its random crop and flip left out, and a warning says so.
TEST_F(PredictCli, WithoutEvalDataUsesTheDataSectionWithoutAugmentationAndWarns) {
  const fs::path copy = edited_checkpoint("no-eval", [](YAML::Node& c) { c.remove("eval_data"); });
  const data::Image a = random_image(kSize, kSize, 1);
  write_file(dir_ / "a.png", data::encode_png(a));
  ASSERT_EQ(predict(fmt::format("--checkpoint {} --input {} --json --logits --top-k 4", copy.string(),
                                (dir_ / "a.png").string()),
                    "no-eval.txt"),
            0);
  const std::string text = testing::read_text(dir_ / "no-eval.txt");
  EXPECT_NE(text.find("no eval_data section"), std::string::npos) << text;
  const std::vector<nlohmann::json> lines = json_lines(text);
  ASSERT_EQ(lines.size(), 1u) << text;
  expect_matches(lines[0], normalised_chw(a, kTrainMean, kTrainStd), 4);
}

TEST_F(PredictCli, BadInputsSayWhatAndWhereAndExitOne) {
  const std::string ck = "--checkpoint " + checkpoint_.string() + " --input ";
  expect_error(ck + (dir_ / "missing.png").string(), "input " + (dir_ / "missing.png").string() + " does not exist");

  write_file(dir_ / "notes.txt", "hello, not an image");
  expect_error(ck + (dir_ / "notes.txt").string(), "is neither a JPEG or PNG image nor a TFRecord file");

  write_file(dir_ / "empty.png", "");
  expect_error(ck + (dir_ / "empty.png").string(), (dir_ / "empty.png").string() + " is empty");

  std::string png = data::encode_png(random_image(kSize, kSize, 1));
  write_file(dir_ / "cut.png", png.substr(0, png.size() / 2));
  expect_error(ck + (dir_ / "cut.png").string(), "cannot decode image " + (dir_ / "cut.png").string());

  fs::create_directories(dir_ / "no-images");
  write_file(dir_ / "no-images" / "readme.md", "nothing to see");
  expect_error(ck + (dir_ / "no-images").string(), "holds no .jpg, .jpeg or .png file");

  // A flipped byte inside record 2's payload: its CRC no longer matches.
  std::string records = testing::read_text(dir_ / "train-0.tfrecord");
  size_t offset = 0;
  for (int r = 0; r < 2; ++r) {
    uint64_t length = 0;
    std::memcpy(&length, records.data() + offset, 8);
    offset += 12 + length + 4;
  }
  records[offset + 12 + 40] ^= 0x5a;
  write_file(dir_ / "bad.tfrecord", records);
  expect_error(ck + (dir_ / "bad.tfrecord").string(), "trainer inspect " + (dir_ / "bad.tfrecord").string());
  expect_error(ck + (dir_ / "bad.tfrecord").string(), "record 2");

  // An image the model does not take: a run that keeps the decoded size, and a 32 x 24 image.
  const fs::path keep = edited_checkpoint("keep-size", [](YAML::Node& c) {
    c["eval_data"]["image"]["height"] = 0;
    c["eval_data"]["image"]["width"] = 0;
  });
  write_file(dir_ / "big.png", data::encode_png(random_image(32, 24, 2)));
  expect_error("--checkpoint " + keep.string() + " --input " + (dir_ / "big.png").string(),
               (dir_ / "big.png").string() + " is 3 x 24 x 32 (channels x height x width)");
  expect_error("--checkpoint " + keep.string() + " --input " + (dir_ / "big.png").string(), "give a 16 x 16 image");

  // Without a GPU, --device cuda says so (with one, it predicts).
  const int cuda = predict(ck + (dir_ / "big.png").string() + " --device cuda", "cuda.txt");
  if (cuda != 0) {
    EXPECT_EQ(cuda, 1);
    EXPECT_NE(testing::read_text(dir_ / "cuda.txt").find("predict --device cuda: no usable GPU"), std::string::npos)
        << testing::read_text(dir_ / "cuda.txt");
  }

  // A language model's checkpoint points to generate; a run's folder of checkpoints to one of them.
  const fs::path gpt = edited_checkpoint("gpt", [](YAML::Node& c) { c["model"]["name"] = "gpt"; });
  expect_error("--checkpoint " + gpt.string() + " --input " + (dir_ / "big.png").string(), "trainer generate");
  expect_error("--checkpoint " + (dir_ / "run" / "checkpoints").string() + " --input " + (dir_ / "big.png").string(),
               "give one of them, e.g. --checkpoint " + checkpoint_.string());
}

}  // namespace
}  // namespace tandem::tools
