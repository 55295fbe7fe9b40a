// Embedding: a lookup table of learned vectors, row i for token id i, as PyTorch's nn.Embedding.
// (N, L) i64 ids -> (N, L, D) f32. Its backward adds each output row's gradient into the row of its
// id (ids repeated in a batch add up), in a fixed order, so replicas stay bitwise identical.
//
// CPU replicas only for now: on a GPU the forward is an Unimplemented error naming the layer (a
// CUDA gather and a deterministic scatter-add are the missing kernels).
#pragma once

#include "engine/nn/module.h"

namespace tandem::nn {

class Embedding : public Module {
 public:
  // Weights from N(0, 1), as PyTorch's default.
  Embedding(int64_t num_embeddings, int64_t dim);
  Variable forward(ExecutionContext& ctx, const Variable& ids) override;
  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t dim() const { return dim_; }

 private:
  int64_t num_embeddings_, dim_;
  Variable weight_;
};

}  // namespace tandem::nn
