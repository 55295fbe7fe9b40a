#include "engine/nn/embedding.h"

#include "engine/autograd/ops.h"
#include "engine/nn/init.h"

namespace tandem::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim) : num_embeddings_(num_embeddings), dim_(dim) {
  TANDEM_CHECK(num_embeddings > 0 && dim > 0, ErrorCode::kInvalidArgument,
               "Embedding: num_embeddings {} and dim {} must be positive", num_embeddings, dim);
  Tensor w = Tensor::empty({num_embeddings, dim});
  init::normal(w, 1.0f);
  weight_ = &register_parameter("weight", w);
}

Variable Embedding::forward(ExecutionContext& ctx, const Variable& ids) {
  TANDEM_CHECK(ids.value().dtype() == DType::kI64 && ids.value().rank() >= 1, ErrorCode::kInvalidArgument,
               "Embedding: takes i64 token ids of any shape (N, L), not {}", ids.value().describe());
  return autograd::embedding(ctx, *weight_, ids.value());
}

}  // namespace tandem::nn
