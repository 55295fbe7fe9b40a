// A finite-difference gradient checker, for ops written with make_op and their hand-written
// backward: the tape's gradient of a random projection of f's output against central
// differences of the same function, element by element, as torch.autograd.gradcheck does.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/autograd/variable.h"

namespace tandem::autograd {

struct GradCheckOptions {
  double eps = 1e-2;    // the step of the central difference (f32 arithmetic: not too small)
  double atol = 1e-3;   // |analytic - numeric| <= atol + rtol * |numeric| passes
  double rtol = 1e-2;
  uint64_t seed = 7;    // of the projection's random weights
};

struct GradCheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string worst;  // "input 1 element 7: analytic 0.31, numeric 0.30" for the largest error
};

// f maps variables holding `inputs` (CPU f32 tensors) to an output of any shape. Every element of
// every input is perturbed by +-eps; f must be deterministic. Gradient mode is on inside.
GradCheckResult check_gradients(ExecutionContext& ctx, const std::function<Variable(const std::vector<Variable>&)>& f,
                                const std::vector<Tensor>& inputs, const GradCheckOptions& options = {});

}  // namespace tandem::autograd
