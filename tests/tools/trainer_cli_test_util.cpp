#include "tests/tools/trainer_cli_test_util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "data/convert/convert.h"

namespace tandem::tools::testing {

const std::string kFashionIdxDir = "/usr/share/datasets/fashion-mnist/";

namespace {

namespace fs = std::filesystem;

const std::string kImages = kFashionIdxDir + "t10k-images-idx3-ubyte.gz";

// The first `count` items of another source.
class Subset final : public data::ConvertSource {
 public:
  Subset(std::unique_ptr<data::ConvertSource> all, size_t count) : all_(std::move(all)), count_(count) {}
  size_t size() const override { return count_; }
  std::string record(size_t i) const override { return all_->record(i); }
  int64_t label(size_t i) const override { return all_->label(i); }
  uint64_t estimated_bytes() const override { return all_->estimated_bytes() / all_->size() * count_; }

 private:
  std::unique_ptr<data::ConvertSource> all_;
  size_t count_;
};

}  // namespace

const std::string kTrainer = std::string(TANDEM_BINARY_DIR) + "/tools/trainer";

std::string cli_skip_reason() {
  if (!fs::exists(kTrainer)) return "the trainer binary is not built: " + kTrainer;
  if (!fs::exists(kImages)) return "dataset-fashion-mnist is not installed: " + kImages;
  return {};
}

void write_fashion_split(const fs::path& out, const std::string& split, size_t count, const std::string& prefix,
                         int min_shards) {
  data::ConvertOptions options;
  options.output_dir = out.string();
  options.prefix = prefix;
  options.min_shards = min_shards;
  auto all = data::open_idx_source(kFashionIdxDir + split + "-images-idx3-ubyte.gz",
                                   kFashionIdxDir + split + "-labels-idx1-ubyte.gz");
  const size_t n = std::min(count, all->size());
  data::convert(Subset(std::move(all), n), options);
}

void write_fashion_tfrecords(const fs::path& dir, size_t count) {
  write_fashion_split(dir / "tfrecords", "t10k", count, "train", 2);
}

const std::string kFashionImage =
    "{format: raw, raw_shape: [28, 28, 1], channels: 1, height: 0, width: 0, normalize: true,\n"
    "          mean: [0.286, 0.286, 0.286], std: [0.353, 0.353, 0.353],\n"
    "          augment: {random_resized_crop: false, horizontal_flip: false}}";

std::string fashion_config(const fs::path& dir, const std::string& train) {
  return fmt::format(R"(seed: 3
device: cpu
model: {{name: small_cnn, num_classes: 10, in_channels: 1, input_size: 28, channels_last: true}}
data:
  files: {}/tfrecords/train-*.tfrecord
  image: {}
train: {}
optimizer: {{name: sgd, lr: 0.05, momentum: 0.9}}
)",
                     dir.string(), kFashionImage, train);
}

std::string train_args(const fs::path& config, const fs::path& run) {
  return fmt::format("--config {} --run-dir {}", config.string(), run.string());
}

int run_trainer(const std::string& args, const fs::path& log) {
  return run_trainer_command(fmt::format("{} {}", kTrainer, args), log);
}

int run_trainer_command(const std::string& command, const fs::path& log) {
  const std::string line = fmt::format("{} > {} 2>&1", command, log.string());
  const int status = std::system(line.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

pid_t start_trainer(const std::string& args, const fs::path& log, const std::string& launcher) {
  const std::string command = fmt::format("exec {} {} {} > {} 2>&1", launcher, kTrainer, args, log.string());
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_trainer(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_text(const fs::path& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

std::vector<MetricRow> read_metric_rows(const fs::path& csv) {
  std::vector<MetricRow> rows;
  std::stringstream lines(read_text(csv));
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    std::vector<std::string> cells;
    std::stringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    if (cells.size() == 4) rows.push_back({std::stoll(cells[1]), cells[2], cells[3]});
  }
  return rows;
}

bool wait_for_log(const fs::path& log, const std::string& text, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_text(log).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace tandem::tools::testing
