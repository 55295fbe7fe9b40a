// Weight initialisation as torchvision does it for ResNet, drawn from a seeded generator so
// a run is repeatable (replica 0's values are broadcast, so only one replica's draws matter).
#pragma once

#include <cstdint>

#include "engine/core/random.h"
#include "engine/core/tensor.h"

namespace tandem::nn::init {

// The generator layers draw their initial weights from; per thread, seeded by manual_seed.
Generator& generator();
void manual_seed(uint64_t seed);

// fan_in and fan_out as PyTorch computes them: dim 1 (resp. 0) times the receptive field.
int64_t fan_in(const Shape& w);
int64_t fan_out(const Shape& w);

// N(0, gain^2 / fan_out) with gain sqrt(2): kaiming_normal_(mode="fan_out", nonlinearity="relu").
void kaiming_normal_fan_out(Tensor& w);
// U(-b, b) with b = sqrt(6 / (fan_in + fan_out)): xavier_uniform_ (MultiheadAttention's in_proj).
void xavier_uniform(Tensor& w);
// U(-bound, bound), for Linear (bound 1/sqrt(fan_in)) and conv/linear biases.
void uniform(Tensor& w, float bound);
// N(0, std^2) from this thread's generator.
void normal(Tensor& w, float std);
void constant(Tensor& w, float value);

}  // namespace tandem::nn::init
