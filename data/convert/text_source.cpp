// Text source: the inputs are read whole (a few MB for a book; a corpus of several GB needs as
// much memory), planned into train and validation windows, and written by convert() per split.
#include <glob.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/ranges.h>

#include "data/convert/text.h"
#include "engine/core/error.h"

namespace tandem::data {

namespace fs = std::filesystem;

uint64_t TextWindows::unused_bytes() const {
  return count == 0 ? bytes : bytes - ((count - 1) * stride + length);
}

namespace {

TextWindows windows_of(uint64_t first_byte, uint64_t bytes, uint64_t length, uint64_t stride) {
  TextWindows w{.first_byte = first_byte, .bytes = bytes, .count = 0, .length = length, .stride = stride};
  if (bytes >= length) w.count = (bytes - length) / stride + 1;
  return w;
}

}  // namespace

TextSplitPlan plan_text_windows(uint64_t total, int64_t block_size, int64_t stride, double validation_fraction) {
  TANDEM_CHECK(block_size >= 1, ErrorCode::kInvalidArgument,
               "block size {}: must be at least 1 (a window holds block size + 1 tokens)", block_size);
  if (stride == 0) stride = block_size;
  TANDEM_CHECK(stride >= 1 && stride <= block_size + 1, ErrorCode::kInvalidArgument,
               "stride {}: must be in [1, block size + 1 = {}] (a longer stride would skip text)", stride,
               block_size + 1);
  TANDEM_CHECK(validation_fraction >= 0.0 && validation_fraction < 1.0, ErrorCode::kInvalidArgument,
               "validation fraction {}: must be in [0, 1) (0 writes no validation split)", validation_fraction);
  const uint64_t length = static_cast<uint64_t>(block_size) + 1;
  TANDEM_CHECK(total >= length, ErrorCode::kInvalidArgument,
               "the text has {} bytes, fewer than one window of block size {} + 1 = {} bytes: give more text or a "
               "smaller block size",
               total, block_size, length);
  const uint64_t val_bytes = static_cast<uint64_t>(std::llround(static_cast<double>(total) * validation_fraction));
  const uint64_t train_bytes = total - val_bytes;
  TANDEM_CHECK(validation_fraction == 0 || val_bytes >= length, ErrorCode::kInvalidArgument,
               "the validation split ({} of {} bytes = {} bytes at the end) is shorter than one window of {} bytes: "
               "raise the validation fraction to at least {:.4f}, lower the block size, or give more text",
               validation_fraction, total, val_bytes, length, static_cast<double>(length) / static_cast<double>(total));
  TANDEM_CHECK(train_bytes >= length, ErrorCode::kInvalidArgument,
               "the validation split ({} of {} bytes) leaves {} bytes for training, fewer than one window of {} bytes: "
               "lower the validation fraction to at most {:.4f}, lower the block size, or give more text",
               validation_fraction, total, train_bytes, length,
               static_cast<double>(total - length) / static_cast<double>(total));
  const uint64_t s = static_cast<uint64_t>(stride);
  return TextSplitPlan{.train = windows_of(0, train_bytes, length, s),
                       .val = windows_of(train_bytes, val_bytes, length, s)};
}

uint64_t count_invalid_utf8(std::string_view text) {
  auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  auto in = [&](size_t i, uint8_t lo, uint8_t hi) { return i < text.size() && byte(i) >= lo && byte(i) <= hi; };
  uint64_t invalid = 0;
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t b = byte(i);
    // The well-formed sequences of Unicode's table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF.
    size_t n = 0;
    if (b < 0x80) {
      n = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      n = in(i + 1, 0x80, 0xBF) ? 2 : 0;
    } else if (b >= 0xE0 && b <= 0xEF) {
      const uint8_t lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
      n = in(i + 1, lo, hi) && in(i + 2, 0x80, 0xBF) ? 3 : 0;
    } else if (b >= 0xF0 && b <= 0xF4) {
      const uint8_t lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
      n = in(i + 1, lo, hi) && in(i + 2, 0x80, 0xBF) && in(i + 3, 0x80, 0xBF) ? 4 : 0;
    }
    if (n == 0) {
      ++invalid;
      n = 1;
    }
    i += n;
  }
  return invalid;
}

std::vector<std::string> resolve_text_inputs(const std::vector<std::string>& inputs) {
  TANDEM_CHECK(!inputs.empty(), ErrorCode::kInvalidArgument, "no text input given: name at least one file or glob");
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    if (input.find_first_of("*?[") == std::string::npos) {
      files.push_back(input);
      continue;
    }
    glob_t matches{};
    const int rc = ::glob(input.c_str(), 0, nullptr, &matches);  // sorted, as glob(3) does by default
    for (size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
    const size_t found = rc == 0 ? matches.gl_pathc : 0;
    globfree(&matches);
    TANDEM_CHECK(found > 0, ErrorCode::kNotFound, "no file matches the text input '{}'", input);
  }
  return files;
}

std::string read_text_files(const std::vector<std::string>& files) {
  std::string text;
  for (const std::string& path : files) {
    std::error_code ec;
    TANDEM_CHECK(!fs::is_directory(path, ec), ErrorCode::kInvalidArgument,
                 "text input {} is a folder: give the files in it, e.g. '{}/*.txt'", path, path);
    std::ifstream in(path, std::ios::binary);
    TANDEM_CHECK(in.good(), ErrorCode::kNotFound, "cannot open text input {}: {}", path, std::strerror(errno));
    std::ostringstream bytes;
    bytes << in.rdbuf();
    TANDEM_CHECK(!in.bad(), ErrorCode::kDataLoss, "reading text input {} failed: {}", path, std::strerror(errno));
    text += std::move(bytes).str();
  }
  TANDEM_CHECK(!text.empty(), ErrorCode::kInvalidArgument, "the text is empty: {} hold(s) no bytes",
               fmt::join(files, ", "));
  return text;
}

namespace {

class TextWindowSource final : public ConvertSource {
 public:
  TextWindowSource(std::shared_ptr<const std::string> text, const TextWindows& windows, std::string key)
      : text_(std::move(text)), windows_(windows), key_(std::move(key)) {
    TANDEM_CHECK(windows_.count == 0 || windows_.first_byte + (windows_.count - 1) * windows_.stride +
                                                windows_.length <= text_->size(),
                 ErrorCode::kInternal, "text windows reach past the text's {} bytes", text_->size());
  }

  size_t size() const override { return windows_.count; }
  bool labelled() const override { return false; }
  int64_t label(size_t) const override { return 0; }
  // Bytes below 128 are one-byte varints, the rest two; ASCII prose is nearly all one.
  uint64_t estimated_bytes() const override { return windows_.count * (windows_.length * 9 / 8 + 32); }

  std::string record(size_t i) const override {
    const char* w = text_->data() + windows_.first_byte + i * windows_.stride;
    std::vector<int64_t> tokens(windows_.length);
    for (size_t k = 0; k < tokens.size(); ++k) tokens[k] = static_cast<uint8_t>(w[k]);
    FeatureMap f;
    f[key_] = Feature::of_ints(std::move(tokens));
    return serialize_example(f);
  }

 private:
  std::shared_ptr<const std::string> text_;
  TextWindows windows_;
  std::string key_;
};

TextSplitSummary write_split(std::shared_ptr<const std::string> text, const TextWindows& windows,
                             const std::string& prefix, std::optional<uint64_t> seed, ConvertOptions options) {
  TANDEM_CHECK(!prefix.empty(), ErrorCode::kInvalidArgument, "text convert: a split needs a file name prefix");
  options.prefix = prefix;
  options.shuffle = seed.has_value();
  options.seed = seed.value_or(0);
  auto source = open_text_window_source(std::move(text), windows);
  return TextSplitSummary{.prefix = prefix, .windows = windows, .files = convert(*source, options)};
}

}  // namespace

std::unique_ptr<ConvertSource> open_text_window_source(std::shared_ptr<const std::string> text,
                                                       const TextWindows& windows, std::string key) {
  return std::make_unique<TextWindowSource>(std::move(text), windows, std::move(key));
}

TextConvertSummary convert_text(const TextConvertOptions& options) {
  TANDEM_CHECK(options.train_prefix != options.val_prefix, ErrorCode::kInvalidArgument,
               "text convert: the training and validation splits share the prefix '{}': give them different ones",
               options.train_prefix);
  TextConvertSummary summary;
  summary.files = resolve_text_inputs(options.inputs);
  auto text = std::make_shared<const std::string>(read_text_files(summary.files));
  const TextSplitPlan plan =
      plan_text_windows(text->size(), options.block_size, options.stride, options.validation_fraction);
  summary.text_bytes = text->size();
  summary.invalid_utf8_bytes = count_invalid_utf8(*text);
  summary.block_size = options.block_size;
  summary.train = write_split(text, plan.train, options.train_prefix, options.shuffle_seed, options.convert);
  if (plan.val.count > 0) summary.val = write_split(text, plan.val, options.val_prefix, std::nullopt, options.convert);
  return summary;
}

}  // namespace tandem::data
