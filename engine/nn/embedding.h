// Embedding: a lookup table of learned vectors, row i for token id i, as PyTorch's nn.Embedding.
// i64 ids of any shape -> (ids..., D) f32, on any backend. Its backward adds each output row's
// gradient into its id's row in position order, so repeated ids sum the same way every run and
// replicas stay bitwise identical.
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
  Variable& weight() { return *weight_; }

 private:
  int64_t num_embeddings_, dim_;
  // The registered slot itself, not a copy of its handle: tie_parameter (GPT's lm_head) replaces
  // what the slot holds, and the forward must see the replacement.
  Variable* weight_;
};

}  // namespace tandem::nn
