// Running the built `trainer` binary as a user does, on a small real subset of Fashion-MNIST
// (Debian's dataset-fashion-mnist converted here to TFRecords): shared by the end-to-end tests.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::tools::testing {

extern const std::string kTrainer;

// Empty when the trainer binary and the dataset are there; else why the test must skip.
std::string cli_skip_reason();

// Debian's dataset-fashion-mnist: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
extern const std::string kFashionIdxDir;

// out/PREFIX-*.tfrecord: the first `count` images (all, when fewer) of Fashion-MNIST's split
// "train" or "t10k", in at least min_shards shards.
void write_fashion_split(const std::filesystem::path& out, const std::string& split, size_t count,
                         const std::string& prefix, int min_shards = 1);

// dir/tfrecords/train-*.tfrecord: the first `count` test images of Fashion-MNIST, 2 shards.
void write_fashion_tfrecords(const std::filesystem::path& dir, size_t count);

// The image section of those records (raw 28x28x1, normalised, no augmentation), a YAML flow
// mapping; an eval_data section over the same records needs it too.
extern const std::string kFashionImage;

// A run config over those records (small_cnn, 28x28 raw images); `train` is the YAML flow
// mapping of the train section, e.g. "{global_batch_size: 32, epochs: 2}".
std::string fashion_config(const std::filesystem::path& dir, const std::string& train);

// "--config CONFIG --run-dir RUN": the arguments of a training run.
std::string train_args(const std::filesystem::path& config, const std::filesystem::path& run);

// Runs `trainer ARGS` through the shell with stdout and stderr into log; returns the exit status
// (-1 when killed by a signal).
int run_trainer(const std::string& args, const std::filesystem::path& log);
// Runs a whole shell command line (a launcher around kTrainer) the same way.
int run_trainer_command(const std::string& command, const std::filesystem::path& log);

// Starts `trainer ARGS` in the background with stdout and stderr into log; returns its pid.
// launcher: a command the trainer runs under ("taskset -c 0"), exec'd in its place.
pid_t start_trainer(const std::string& args, const std::filesystem::path& log, const std::string& launcher = "");
// Waits for it; the exit status, or 128 + the signal that ended it.
int wait_trainer(pid_t pid);
// Waits (up to timeout_s) until the log file contains text; false on timeout.
bool wait_for_log(const std::filesystem::path& log, const std::string& text, double timeout_s);

std::string read_text(const std::filesystem::path& path);

// The rows of a metrics.csv after its header, split into (wall_time, step, tag, value); rows of
// another width (a tag with a comma) are left out.
struct MetricRow {
  int64_t step = 0;
  std::string tag, value;
};
std::vector<MetricRow> read_metric_rows(const std::filesystem::path& csv);

}  // namespace tandem::tools::testing
