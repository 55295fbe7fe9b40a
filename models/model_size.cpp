#include "models/model_size.h"

#include <unistd.h>

#include "engine/core/error.h"

namespace tandem::models {
namespace {

double host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

double mlp_parameters(const nn::ModelSpec& s) {
  double total = 0, in = static_cast<double>(s.in_channels) * s.input_size * s.input_size;
  for (int64_t width : s.hidden) {
    total += (in + 1) * static_cast<double>(width);
    in = static_cast<double>(width);
  }
  return total + (in + 1) * static_cast<double>(s.num_classes);
}

double vit_parameters(const nn::ModelSpec& s) {
  const double d = static_cast<double>(s.hidden_dim), mlp = static_cast<double>(s.mlp_dim);
  const double patches = s.patch_size > 0 ? static_cast<double>(s.input_size / s.patch_size) : 0.0;
  const double per_layer = 4 * d * d + 2 * d * mlp;  // attention's projections, then the MLP
  return static_cast<double>(s.in_channels) * s.patch_size * s.patch_size * d + (patches * patches + 1) * d +
         static_cast<double>(s.num_layers) * per_layer + d * static_cast<double>(s.num_classes);
}

double gpt_parameters(const nn::ModelSpec& s) {
  const double d = static_cast<double>(s.n_embd);
  return static_cast<double>(s.vocab_size + s.block_size) * d + static_cast<double>(s.n_layer) * 12 * d * d;
}

}  // namespace

double estimated_parameters(const nn::ModelSpec& spec) {
  if (spec.name == "mlp") return mlp_parameters(spec);
  if (spec.name == "vit") return vit_parameters(spec);
  if (spec.name == "gpt") return gpt_parameters(spec);
  return 0.0;
}

void check_model_fits(const nn::ModelSpec& spec) {
  const double parameters = estimated_parameters(spec), bytes = 4 * parameters, memory = host_memory_bytes();
  if (memory <= 0 || bytes <= memory) return;
  const char* keys = spec.name == "mlp"   ? "hidden, input_size, in_channels, num_classes"
                     : spec.name == "vit" ? "hidden_dim, mlp_dim, num_layers, num_classes"
                                          : "n_embd, n_layer, vocab_size, block_size";
  throw_error(ErrorCode::kResourceExhausted,
              "model '{}' would hold about {:.3g} parameters: {:.1f} GB of f32 weights alone, more than this machine's "
              "{:.1f} GB of memory (training needs several times the weights). Check the model's sizes ({})",
              spec.name, parameters, bytes / 1e9, memory / 1e9, keys);
}

}  // namespace tandem::models
