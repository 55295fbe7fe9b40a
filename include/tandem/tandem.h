// Tandem, all of it: tensors, ops and custom ops, modules, optimizers, data, replicas, the
// Trainer and ONNX export. docs/EMBEDDING.md is the guide; each header below documents its part.
#pragma once

#include "tandem/custom_op.h"
#include "tandem/data.h"
#include "tandem/distribute.h"
#include "tandem/export.h"
#include "tandem/models.h"
#include "tandem/nn.h"
#include "tandem/ops.h"
#include "tandem/optim.h"
#include "tandem/tensor.h"
#include "tandem/train.h"
#include "tandem/version.h"
