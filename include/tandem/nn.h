// Modules: Module (parameters, buffers, train/eval, to(device)), the layers (Conv2d, BatchNorm2d,
// Linear, Embedding, pooling, Dropout, Sequential, Conv1d), ModuleList and ModuleDict, the transformer layers
// (LayerNorm, GELU, MultiheadAttention, TransformerEncoderLayer), RMSNorm, GroupNorm and initialisers.
#pragma once

#include "engine/nn/containers.h"
#include "engine/nn/conv1d.h"
#include "engine/nn/embedding.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "engine/nn/module.h"
#include "engine/nn/norm_layers.h"
#include "engine/nn/transformer_layers.h"
