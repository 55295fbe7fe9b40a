// A model's size from its spec alone, before anything is allocated: a config whose sizes are each
// in range can still ask for more weights than the machine holds (hidden: [60000, 60000] is two
// 14 GB matrices), and building it would end in the kernel's OOM killer, not an error.
#pragma once

#include "engine/nn/model_spec.h"

namespace tandem::models {

// The parameter count of a built-in dense family (mlp, vit, gpt), from the spec's sizes, as a
// double so that no product can overflow; 0 for the ResNets and the small CNN, whose sizes the
// spec barely moves (their largest, resnet152, holds 60M), and for registered models.
double estimated_parameters(const nn::ModelSpec& spec);

// ResourceExhausted when the f32 weights alone would not fit in this machine's memory, naming the
// count, the bytes, the memory and the keys that set the size.
void check_model_fits(const nn::ModelSpec& spec);

}  // namespace tandem::models
