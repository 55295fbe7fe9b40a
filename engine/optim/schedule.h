// Learning-rate schedules as functions of the step: constant, step, multistep, cosine and
// polynomial decay, each with an optional linear warmup, and the linear scaling rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::optim {

struct ScheduleOptions {
  std::string name = "constant";  // constant | step | multistep | cosine | polynomial
  // Linear warmup over warmup_steps. Without a start factor step s runs at (s + 1) / warmup_steps x
  // the scheduled lr, so no step is wasted at lr 0 (nanoGPT's ramp); with one, at
  // (f + (1 - f) s / warmup_steps) x lr, PyTorch's LinearLR (f = 0: the first step at lr 0, if asked).
  int64_t warmup_steps = 0;
  std::optional<float> warmup_start_factor = std::nullopt;
  int64_t step_size = 0;               // step: decay every step_size steps
  std::vector<int64_t> milestones{};   // multistep: decay at these steps
  float gamma = 0.1f;                  // step and multistep: the decay factor
  float min_lr = 0.0f;                 // cosine and polynomial: the final lr
  float power = 1.0f;                  // polynomial
  // Linear scaling rule (Goyal et al.): base lr x global_batch / reference_batch.
  bool scale_lr_with_batch = false;
  int64_t reference_batch_size = 256;
};

class LrSchedule {
 public:
  // total_steps: the run's length (cosine and polynomial decay end there).
  LrSchedule(ScheduleOptions options, float base_lr, int64_t global_batch_size, int64_t total_steps);
  float lr_at(int64_t step) const;  // step counts from 0
  float base_lr() const { return base_lr_; }

 private:
  float decayed(int64_t step) const;

  ScheduleOptions options_;
  float base_lr_;
  int64_t total_steps_;
};

}  // namespace tandem::optim
