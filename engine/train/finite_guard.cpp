#include "engine/train/finite_guard.h"

#include <cmath>
#include <vector>

#include "engine/backend/ops.h"

namespace tandem::train {

std::string first_nonfinite_parameter(ExecutionContext& ctx, nn::Module& model) {
  std::vector<Tensor> values;
  auto params = model.named_parameters();
  for (auto& [name, p] : params) values.push_back(p.value());
  if (values.empty() || std::isfinite(backend::global_norm(ctx, values))) return {};
  for (auto& [name, p] : params) {
    if (!std::isfinite(backend::global_norm(ctx, {p.value()}))) return name;
  }
  return "(a parameter)";  // the sum overflowed though no single tensor's did
}

}  // namespace tandem::train
