// The rules of scaled_dot_product_attention that every backend's kernels share (host and device):
// which keys a query sees under the causal mask, and which probabilities dropout keeps.
#pragma once

#include <cstdint>

#include "engine/backend/host_device.h"
#include "engine/backend/philox.h"

namespace tandem::backend::attention_math {

// Causal masks align bottom-right, as FlashAttention's: query i of tq sees keys j <= i + (tk - tq),
// so the last query sees every key (a key/value cache's new tokens see the whole past). With
// tq == tk this is PyTorch's is_causal (tril).
TANDEM_HOST_DEVICE inline int64_t last_visible_key(int64_t i, int64_t tq, int64_t tk) { return i + (tk - tq); }

// Probability (row, key) of head bh is kept by dropout: its uniform draw, indexed by position in
// the (B * H, Tq, Tk) probabilities, is at least p.
TANDEM_HOST_DEVICE inline bool kept(uint64_t seed, float p, int64_t bh, int64_t row, int64_t key, int64_t tq,
                                    int64_t tk) {
  const uint64_t index = (static_cast<uint64_t>(bh) * static_cast<uint64_t>(tq) + static_cast<uint64_t>(row)) *
                             static_cast<uint64_t>(tk) +
                         static_cast<uint64_t>(key);
  return philox::uniform(seed, index) >= p;
}

}  // namespace tandem::backend::attention_math
