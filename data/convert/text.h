// Byte-level text for language models, behind `trainer convert --source text`: the bytes of the
// text are its tokens (a vocabulary of 256, as llm.c's and nanoGPT's character-level data, on
// bytes), cut into windows of block_size + 1 tokens, each a tf.Example with one int64 feature
// "tokens". The validation split is the end of the text, so no window of one split holds a
// token of the other.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/convert/convert.h"
#include "data/convert/source.h"

namespace tandem::data {

// The windows of one split: window i holds the bytes [first_byte + i * stride, + length).
struct TextWindows {
  uint64_t first_byte = 0;  // where the split's part of the text starts
  uint64_t bytes = 0;       // the part's length
  uint64_t count = 0;       // windows in it (0: the split is not written)
  uint64_t length = 0;      // tokens per window: block_size + 1
  uint64_t stride = 0;      // bytes from one window's start to the next's

  uint64_t tokens() const { return count * length; }
  // The bytes at the part's end that no window reaches (fewer than a stride).
  uint64_t unused_bytes() const;
};

struct TextSplitPlan {
  TextWindows train;
  TextWindows val;  // count 0 when validation_fraction is 0
};

// Splits a text of `total` bytes: the last round(total x validation_fraction) bytes are the
// validation part, the rest the training part. stride 0 means block_size, so that consecutive
// windows share one token (x = w[:-1], y = w[1:] leave no pair out). A block size below 1, a
// stride outside [1, block_size + 1], a fraction outside [0, 1), or a part too short for one
// window is kInvalidArgument saying how many bytes each part has and needs.
TextSplitPlan plan_text_windows(uint64_t total, int64_t block_size, int64_t stride, double validation_fraction);

// Bytes that are not part of a well-formed UTF-8 sequence (they are tokens all the same).
uint64_t count_invalid_utf8(std::string_view text);

// The files `inputs` name, in the order given: a pattern with * ? or [ becomes its matches in
// sorted order (kNotFound when there are none), anything else is taken as a path.
std::vector<std::string> resolve_text_inputs(const std::vector<std::string>& inputs);

// The bytes of the files, concatenated in order, as they are (no separator is added). kNotFound
// for a file that cannot be read; kInvalidArgument when all of them together are empty.
std::string read_text_files(const std::vector<std::string>& files);

// The windows of one split as records: {key: int64 list of `length` byte values}.
std::unique_ptr<ConvertSource> open_text_window_source(std::shared_ptr<const std::string> text,
                                                       const TextWindows& windows, std::string key = "tokens");

struct TextConvertOptions {
  std::vector<std::string> inputs;  // files or glob patterns (resolve_text_inputs)
  int64_t block_size = 256;
  int64_t stride = 0;               // 0: block_size
  double validation_fraction = 0.1;  // 0: no validation split
  std::string train_prefix = "train";
  std::string val_prefix = "val";
  // Set: the training windows go to the shards in an order shuffled with this seed; unset: in
  // text order, shard s holding the s-th run of windows. Validation windows keep text order.
  std::optional<uint64_t> shuffle_seed;
  ConvertOptions convert;  // output folder, shard sizes and counts, compression (prefix and seed are per split)
};

struct TextSplitSummary {
  std::string prefix;
  TextWindows windows;
  ConvertSummary files;
};

struct TextConvertSummary {
  std::vector<std::string> files;  // the inputs, resolved
  uint64_t text_bytes = 0;
  uint64_t invalid_utf8_bytes = 0;
  int64_t block_size = 0;
  TextSplitSummary train;
  std::optional<TextSplitSummary> val;
};

// Reads the inputs, plans the windows and writes both splits as sharded TFRecords.
TextConvertSummary convert_text(const TextConvertOptions& options);

}  // namespace tandem::data
