// The map function of token records (`data.tokens`): a tf.Example whose int64 feature holds one
// window of a language model's tokens becomes an i64 tensor (length) on a loader thread; a batch
// of them is (N, length), nanoGPT's x = w[:, :-1] and y = w[:, 1:] in one tensor.
#pragma once

#include <cstdint>
#include <string>

#include "data/pipeline/dataset.h"

namespace tandem::data {

struct TokenMapOptions {
  std::string key = "tokens";  // the int64 feature with the window
  int64_t length = 0;          // tokens per record: block_size + 1 (required, >= 2)
  int64_t vocab_size = 0;      // every token must be in [0, vocab_size) (required, >= 1)
};

// Element{text: serialized tf.Example} -> Element{tensors: {tokens i64 (length)}}. A record
// without the feature, of another length or with a token outside the vocabulary is
// kInvalidArgument naming the file and record.
MapFn make_token_map(TokenMapOptions options);

}  // namespace tandem::data
