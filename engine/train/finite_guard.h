// The NaN guard's second half: a loss can stay finite while weights are NaN (a NaN input
// normalisation reaches the first layer's gradient, and ReLU turns the NaN activations into
// zeros), so the trainer checks the parameters too, at each log line and before each checkpoint.
#pragma once

#include <string>

#include "engine/core/context.h"
#include "engine/nn/module.h"

namespace tandem::train {

// The name of the first parameter of `model` holding a NaN or an inf (or a value whose square
// overflows float, past 1.8e19), or "" when every one is finite. One sum of squares over all
// parameters on their device and one read of it; the names are searched only when it is not finite.
std::string first_nonfinite_parameter(ExecutionContext& ctx, nn::Module& model);

}  // namespace tandem::train
