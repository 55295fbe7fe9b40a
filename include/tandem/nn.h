// Modules: Module (parameters, buffers, train/eval, to(device)), the layers (Conv2d, BatchNorm2d,
// Linear, Embedding, pooling, Dropout, Sequential), ModuleList and ModuleDict, the transformer layers (LayerNorm, GELU,
// MultiheadAttention, TransformerEncoderLayer) and initialisers.
#pragma once

#include "engine/nn/containers.h"
#include "engine/nn/embedding.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "engine/nn/module.h"
#include "engine/nn/transformer_layers.h"
