// Tensors and where they live: Tensor, DType, Shape, Device, ExecutionContext (a replica's device,
// stream, threads and random generator), the Error type every call throws, and Batch, the named
// tensors a training step reads.
#pragma once

#include "engine/core/batch.h"
#include "engine/core/context.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/metrics_sink.h"
#include "engine/core/random.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
