#include "engine/train/task.h"

#include <fmt/format.h>

#include "engine/backend/ops.h"
#include "engine/core/error.h"

namespace tandem::train {
namespace {

// A view of one element of sums, on its device (a tensor handle that does not own the memory).
Tensor element(TaskStep& step, int index) {
  const int64_t n = step.sums.numel();
  TANDEM_CHECK(index >= 0 && index < n, ErrorCode::kInvalidArgument,
               "task: metric sum {} is outside the step's {} sums (its metrics and the example count)", index, n);
  return Tensor::borrow(static_cast<float*>(step.sums.raw_data()) + index, Shape{}, DType::kF32, step.sums.device());
}

}  // namespace

void add_to_sum(TaskStep& step, int index, const Tensor& value, float scale) {
  TANDEM_CHECK(value.numel() == 1 && value.dtype() == DType::kF32, ErrorCode::kInvalidArgument,
               "task: add_to_sum takes a one-element f32 tensor, not {}", value.describe());
  Tensor target = element(step, index);
  backend::axpy(step.ctx, scale, value.rank() == 0 ? value : value.reshape(Shape{}), target);
}

void add_to_sum(TaskStep& step, int index, double value) {
  Tensor target = element(step, index);
  backend::axpy(step.ctx, static_cast<float>(value), step.one, target);
}

int64_t Task::units_per_example(const Batch&) const { return 1; }

void Task::check_batch(const Batch& batch, std::string_view data) const {
  (void)batch;
  (void)data;
}

void Task::finish_eval(std::span<double> means) const { (void)means; }

std::string Task::describe_eval(std::span<const double> means) const {
  std::vector<std::string> names = eval_metrics();
  std::string out;
  for (size_t i = 0; i < means.size() && i < names.size(); ++i) {
    out += fmt::format("{}{} {:.4f}", out.empty() ? "" : ", ", names[i], means[i]);
  }
  return out;
}

}  // namespace tandem::train
