// SyncBatchNorm's statistics: one all-reduce of packed sums. Counts travel as floats, exact up
// to 2^24 values per channel across replicas (16.7 M: a 256 x 256 x 256 global batch).
#include "engine/distribute/sync_batch_stats.h"

#include <algorithm>
#include <cstring>

namespace tandem::distribute {

SyncBatchStats::SyncBatchStats(Communicator& comm, int64_t channels)
    : comm_(&comm), channels_(channels), packed_(Tensor::zeros({2 * channels + 1}, DType::kF32, comm.device())) {
  TANDEM_CHECK(channels > 0, ErrorCode::kInvalidArgument, "SyncBatchStats needs channels > 0, got {}", channels);
  TANDEM_CHECK(comm.device().is_cpu(), ErrorCode::kUnimplemented,
               "SyncBatchStats runs on CPU replicas only so far (communicator on {})", comm.device().str());
}

int64_t SyncBatchStats::reduce(const Tensor& sum, const Tensor& sum_sq, int64_t count, const Tensor& mean,
                               const Tensor& var) {
  const int64_t c = channels_;
  for (const Tensor* t : {&sum, &sum_sq, &mean, &var}) {
    TANDEM_CHECK(t->defined() && t->dtype() == DType::kF32 && t->numel() == c && t->device().is_cpu(),
                 ErrorCode::kInvalidArgument, "SyncBatchStats::reduce: expected f32[{}] cpu tensors, got {}", c,
                 t->defined() ? t->describe() : std::string("undefined"));
  }
  float* p = packed_.data<float>();
  std::memcpy(p, sum.data<float>(), static_cast<size_t>(c) * sizeof(float));
  std::memcpy(p + c, sum_sq.data<float>(), static_cast<size_t>(c) * sizeof(float));
  p[2 * c] = static_cast<float>(count);
  comm_->all_reduce(packed_, ReduceOp::kSum);
  const double n = p[2 * c];
  TANDEM_CHECK(n > 0, ErrorCode::kInvalidArgument, "SyncBatchStats: the global batch has no values");
  float* m = mean.data<float>();
  float* v = var.data<float>();
  for (int64_t i = 0; i < c; ++i) {
    double mu = p[i] / n;
    m[i] = static_cast<float>(mu);
    v[i] = static_cast<float>(std::max(0.0, p[c + i] / n - mu * mu));  // E[x^2] - E[x]^2, clamped at 0
  }
  return static_cast<int64_t>(n);
}

}  // namespace tandem::distribute
