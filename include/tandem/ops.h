// Ops on the tape (autograd::conv2d, linear, relu, cross_entropy_loss, ...) and on plain tensors
// (backend::matmul, add, axpy, ...), each checked and dispatched to the context's device.
#pragma once

#include "engine/autograd/composite.h"
#include "engine/autograd/ops.h"
#include "engine/autograd/variable.h"
#include "engine/backend/factories.h"
#include "engine/backend/ops.h"
