#include "engine/nn/embedding.h"

#include <cstring>
#include <vector>

#include "engine/autograd/variable.h"
#include "engine/core/error.h"
#include "engine/nn/init.h"

namespace tandem::nn {
namespace {

// Every id checked once, so a bad token names its position instead of reading out of bounds.
void check_ids(const Tensor& ids, int64_t num_embeddings) {
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    TANDEM_CHECK(id[i] >= 0 && id[i] < num_embeddings, ErrorCode::kInvalidArgument,
                 "Embedding: id {} at position {} of the batch's {} ids is outside [0, {}): check the vocabulary "
                 "size the model was built with against the data's token ids",
                 id[i], i, ids.numel(), num_embeddings);
  }
}

}  // namespace

Embedding::Embedding(int64_t num_embeddings, int64_t dim) : num_embeddings_(num_embeddings), dim_(dim) {
  TANDEM_CHECK(num_embeddings > 0 && dim > 0, ErrorCode::kInvalidArgument,
               "Embedding: num_embeddings {} and dim {} must be positive", num_embeddings, dim);
  Tensor w = Tensor::empty({num_embeddings, dim});
  init::normal(w, 1.0f);
  weight_ = register_parameter("weight", w);
}

Variable Embedding::forward(ExecutionContext& ctx, const Variable& ids_variable) {
  (void)ctx;
  const Tensor& ids = ids_variable.value();
  TANDEM_CHECK(ids.dtype() == DType::kI64 && ids.rank() >= 1, ErrorCode::kInvalidArgument,
               "Embedding: takes i64 token ids of any shape (N, L), not {}", ids.describe());
  const Tensor& weight = weight_.value();
  TANDEM_CHECK(ids.device().is_cpu() && weight.device().is_cpu(), ErrorCode::kUnimplemented,
               "Embedding runs on CPU replicas only (ids on {}, weights on {}): its CUDA kernels are not written yet; "
               "train this model with device: cpu",
               ids.device().str(), weight.device().str());
  check_ids(ids, num_embeddings_);
  TANDEM_CHECK(ids.rank() < Shape::kMaxRank, ErrorCode::kInvalidArgument, "Embedding: ids of rank {} leave no room "
               "for the vector dimension (rank {} at most)", ids.rank(), Shape::kMaxRank - 1);
  std::vector<int64_t> dims(ids.shape().dims().begin(), ids.shape().dims().end());
  dims.push_back(dim_);
  Tensor y = Tensor::empty(Shape(std::span<const int64_t>(dims)));
  const int64_t n = ids.numel(), d = dim_;
  const int64_t* id = ids.data<int64_t>();
  const float* w = weight.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * d, w + id[i] * d, static_cast<size_t>(d) * sizeof(float));
  const int64_t rows = num_embeddings_;
  // The ids tensor is held by the closure: the backward needs them, whatever the caller does next.
  return autograd::make_op("embedding", y, {weight_}, [ids, n, d, rows](const Tensor& dy) {
    Tensor dw = Tensor::zeros({rows, d});
    const int64_t* token = ids.data<int64_t>();
    const float* g = dy.data<float>();
    float* acc = dw.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      float* row = acc + token[i] * d;
      for (int64_t j = 0; j < d; ++j) row[j] += g[i * d + j];
    }
    return std::vector<Tensor>{dw};
  });
}

}  // namespace tandem::nn
