// Small models for quick runs and tests: a multi-layer perceptron and a two-stage CNN.
#pragma once

#include <vector>

#include "engine/nn/layers.h"

namespace tandem::models {

// Flatten -> (Linear -> ReLU) per hidden width -> Linear to the classes.
std::shared_ptr<nn::Sequential> make_mlp(int64_t in_features, const std::vector<int64_t>& hidden,
                                         int64_t num_classes);

// Two conv-BN-ReLU-maxpool stages (32 and 64 channels), global average pooling, a linear head.
std::shared_ptr<nn::Sequential> make_small_cnn(int64_t in_channels, int64_t num_classes);

}  // namespace tandem::models
