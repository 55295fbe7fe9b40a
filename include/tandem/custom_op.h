// Writing an op with its own backward: autograd::make_op records the output, the inputs and the
// backward function on the tape; autograd::check_gradients checks that backward against finite
// differences (docs/EMBEDDING.md walks through one).
#pragma once

#include "engine/autograd/gradcheck.h"
#include "engine/autograd/variable.h"
