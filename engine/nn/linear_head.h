// A model whose output is a bias-free linear layer over its last hidden states: a language model's
// head. A loss that fuses that layer with softmax cross-entropy (autograd::linear_cross_entropy_loss,
// what the language-modeling task uses when the model offers it) asks for the two parts instead of
// the logits, so the (tokens, vocabulary) logits never exist whole.
#pragma once

#include "engine/autograd/variable.h"
#include "engine/core/context.h"
#include "engine/nn/module.h"

namespace tandem::nn {

class LinearHead {
 public:
  virtual ~LinearHead() = default;
  // The model's forward(ctx, input) is linear(hidden_states(ctx, input), head_weight()) over the last
  // dimension: the same ops in the same order up to the head.
  virtual autograd::Variable hidden_states(ExecutionContext& ctx, const autograd::Variable& input) = 0;
  // (classes, features), with no bias.
  virtual const autograd::Variable& head_weight() const = 0;
};

// autograd::cross_entropy_loss(model.forward(ctx, input), labels, label_smoothing, divisor), computed
// by autograd::linear_cross_entropy_loss where the model is a LinearHead (the same loss; gradients
// within rounding). What the language-modeling task and the training benchmarks call.
autograd::Variable model_cross_entropy_loss(ExecutionContext& ctx, Module& model, const autograd::Variable& input,
                                            const Tensor& labels, float label_smoothing, int64_t divisor);

}  // namespace tandem::nn
