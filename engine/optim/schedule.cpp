#include "engine/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/core/error.h"
#include "engine/core/suggest.h"

namespace tandem::optim {

LrSchedule::LrSchedule(ScheduleOptions options, float base_lr, int64_t global_batch_size, int64_t total_steps)
    : options_(std::move(options)), base_lr_(base_lr), total_steps_(total_steps) {
  static const std::vector<std::string> kNames = {"constant", "step", "multistep", "cosine", "polynomial"};
  TANDEM_CHECK(std::find(kNames.begin(), kNames.end(), options_.name) != kNames.end(), ErrorCode::kInvalidArgument,
               "unknown lr schedule '{}'{}: use constant, step, multistep, cosine or polynomial", options_.name,
               did_you_mean(options_.name, kNames));
  TANDEM_CHECK(options_.name != "step" || options_.step_size > 0, ErrorCode::kInvalidArgument,
               "lr schedule 'step' needs step_size > 0, got {}", options_.step_size);
  TANDEM_CHECK(options_.warmup_steps >= 0 && total_steps_ > 0, ErrorCode::kInvalidArgument,
               "lr schedule: warmup_steps {} must not be negative and total steps {} positive", options_.warmup_steps,
               total_steps_);
  if (options_.scale_lr_with_batch) {
    TANDEM_CHECK(options_.reference_batch_size > 0, ErrorCode::kInvalidArgument,
                 "lr schedule: reference_batch_size must be positive, got {}", options_.reference_batch_size);
    base_lr_ *= static_cast<float>(global_batch_size) / static_cast<float>(options_.reference_batch_size);
  }
}

float LrSchedule::decayed(int64_t step) const {
  const auto& o = options_;
  if (o.name == "step") return base_lr_ * std::pow(o.gamma, static_cast<float>(step / o.step_size));
  if (o.name == "multistep") {
    auto passed = std::count_if(o.milestones.begin(), o.milestones.end(), [&](int64_t m) { return step >= m; });
    return base_lr_ * std::pow(o.gamma, static_cast<float>(passed));
  }
  // Cosine and polynomial decay run over the steps after warmup.
  int64_t span = std::max<int64_t>(1, total_steps_ - o.warmup_steps);
  double progress = std::clamp(static_cast<double>(step - o.warmup_steps) / static_cast<double>(span), 0.0, 1.0);
  if (o.name == "cosine") {
    return o.min_lr + (base_lr_ - o.min_lr) * static_cast<float>(0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
  }
  if (o.name == "polynomial") {
    return o.min_lr + (base_lr_ - o.min_lr) * static_cast<float>(std::pow(1.0 - progress, o.power));
  }
  return base_lr_;
}

float LrSchedule::lr_at(int64_t step) const {
  float lr = decayed(step);
  if (step < options_.warmup_steps) {
    const float steps = static_cast<float>(options_.warmup_steps);
    if (!options_.warmup_start_factor) return lr * (static_cast<float>(step + 1) / steps);
    const float f = *options_.warmup_start_factor, t = static_cast<float>(step) / steps;
    return lr * (f + (1.0f - f) * t);
  }
  return lr;
}

}  // namespace tandem::optim
