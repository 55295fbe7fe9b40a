// Text generation with a GPT: each new token is sampled from the logits of the last position
// (greedy at temperature 0, else softmax(logits / temperature) over the top_k largest), and appended.
// With the key/value cache each new token costs one position per layer; without it (use_cache
// false) every step runs the whole window again, which the tests hold the cached path to. When the
// sequence outgrows block_size, the window keeps its last block_size tokens, as nanoGPT's generate.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "models/gpt.h"

namespace tandem::models {

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  float temperature = 1.0f;  // 0: greedy (the largest logit, the first of ties)
  int64_t top_k = 0;         // > 0: sample among the k largest logits only
  uint64_t seed = 0;
  bool use_cache = true;
};

// The new tokens after prompt (at least one token); on_token(id) runs after each. The model runs in
// eval mode, without gradients, on ctx's device.
std::vector<int64_t> generate(ExecutionContext& ctx, Gpt& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options, const std::function<void(int64_t)>& on_token = {});

// One token from a row of logits under the options' temperature and top_k (g draws the sample).
int64_t sample_token(const std::vector<float>& logits, const GenerateOptions& options, Generator& g);

}  // namespace tandem::models
