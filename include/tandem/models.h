// Models by name: the built-in ResNets, MLP, small CNN, ViT and GPT, and register_model for a
// program's own; GPT's generation (with and without a key/value cache).
#pragma once

#include "models/gpt.h"
#include "models/gpt_generate.h"
#include "models/registry.h"
#include "models/vit.h"
