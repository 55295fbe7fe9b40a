// Embedding on the CPU: a gather of weight rows by id, and its backward adding each output row's
// gradient into its id's row in position order (so repeated ids sum the same way every run).
#include <algorithm>
#include <cstring>

#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"

namespace tandem::backend::cpu {
namespace {

// Ids are data: each is checked before any row is read, naming its position.
void check_ids(const char* op, const Tensor& ids, int64_t rows) {
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    TANDEM_CHECK(id[i] >= 0 && id[i] < rows, ErrorCode::kInvalidArgument,
                 "{}: id {} at position {} of the {} ids is outside [0, {}): check the vocabulary size the model "
                 "was built with against the data's token ids",
                 op, id[i], i, ids.numel(), rows);
  }
}

}  // namespace

void embedding_forward(Ctx& ctx, const Tensor& weight, const Tensor& ids, Tensor& y) {
  apply_thread_budget(ctx);
  const int64_t rows = weight.dim(0), d = weight.dim(1), n = ids.numel();
  check_ids("embedding_forward", ids, rows);
  const int64_t* id = ids.data<int64_t>();
  const float* w = weight.data<float>();
  float* out = y.data<float>();
#pragma omp parallel for schedule(static) if (n * d >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * d, w + id[i] * d, static_cast<size_t>(d) * sizeof(float));
}

void embedding_backward(Ctx& ctx, const Tensor& ids, const Tensor& dy, Tensor& dweight) {
  apply_thread_budget(ctx);
  const int64_t rows = dweight.dim(0), d = dweight.dim(1), n = ids.numel();
  check_ids("embedding_backward", ids, rows);
  const int64_t* id = ids.data<int64_t>();
  const float* g = dy.data<float>();
  float* acc = dweight.data<float>();
  std::memset(acc, 0, static_cast<size_t>(rows * d) * sizeof(float));
  // Threads split the columns, never the positions: each column's sums run in position order.
  constexpr int64_t kChunk = 16;
#pragma omp parallel for schedule(static) if (n * d >= kParallelGrain)
  for (int64_t c0 = 0; c0 < d; c0 += kChunk) {
    const int64_t c1 = std::min(d, c0 + kChunk);
    for (int64_t i = 0; i < n; ++i) {
      float* row = acc + id[i] * d;
      for (int64_t j = c0; j < c1; ++j) row[j] += g[i * d + j];
    }
  }
}

}  // namespace tandem::backend::cpu
