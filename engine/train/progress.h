// Progress output of replica 0: a one-line bar redrawn in place on a terminal, plain log lines
// every log_every_steps otherwise, and the per-epoch summary with the step-time breakdown.
#pragma once

#include <cstdint>
#include <string>

#include "engine/train/metrics.h"

namespace tandem::train {

struct ProgressLine {
  int64_t epoch = 0, epochs = 0;
  int64_t step_in_epoch = 0, steps_in_epoch = 0;  // steps_in_epoch 0: unknown
  int64_t global_step = 0;
  double images_per_sec = 0;
  std::string unit = "img";  // of images_per_sec: "img", "tok"
  double loss = 0;
  double lr = 0;
  double input_wait_fraction = 0;
  std::string devices;  // "cuda:0 util 97% mem 31.2/80.0 GiB 412 W | cuda:1 ..." (GPU replicas, NVML)
};

class Progress {
 public:
  // terminal: redraw one line in place; otherwise print a line every `every` steps.
  Progress(bool terminal, int64_t every);
  void update(const ProgressLine& line);
 private:
  bool terminal_;
  int64_t every_;
};

// Ends an open progress bar's line, whoever drew it: stderr has one such line per process, and
// any log message must start on a line of its own.
void finish_progress_line();

// True when stderr is a terminal (progress bars) rather than a file or a pipe.
bool stderr_is_terminal();

}  // namespace tandem::train
