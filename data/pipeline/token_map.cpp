// make_token_map: record -> tokens (length) i64, every value checked against the vocabulary
// here, on the loader thread, so that an embedding lookup never reads past its table.
#include "data/pipeline/token_map.h"

#include "data/example_fast.h"
#include "engine/core/error.h"

namespace tandem::data {
namespace {

Element map_one(const TokenMapOptions& o, FastExampleParser& parser, Element in) {
  parser.parse(in.text);
  const FeatureView& f = parser.feature(0);
  TANDEM_CHECK(f.present, ErrorCode::kInvalidArgument,
               "no feature '{}' (data.tokens.key): is this a record of token windows (trainer convert --source text)?",
               o.key);
  TANDEM_CHECK(f.type == FeatureType::kInt64, ErrorCode::kInvalidArgument,
               "feature '{}' is {}; token windows are int64 lists", o.key, feature_type_name(f.type));
  TANDEM_CHECK(static_cast<int64_t>(f.ints.size()) == o.length, ErrorCode::kInvalidArgument,
               "feature '{}' holds {} tokens but data.tokens.length is {}: make the windows with block size {} "
               "(trainer convert --source text --block-size {}), or set data.tokens.length to {}",
               o.key, f.ints.size(), o.length, o.length - 1, o.length - 1, f.ints.size());
  Tensor tokens = Tensor::empty(Shape{o.length}, DType::kI64);
  int64_t* out = tokens.data<int64_t>();
  for (int64_t i = 0; i < o.length; ++i) {
    const int64_t t = f.ints[static_cast<size_t>(i)];
    TANDEM_CHECK(t >= 0 && t < o.vocab_size, ErrorCode::kInvalidArgument,
                 "token {} at position {} (feature '{}') is outside [0, {}): data.tokens.vocab_size is {}; fix the "
                 "record or set the vocabulary size the tokens were made with",
                 t, i, o.key, o.vocab_size, o.vocab_size);
    out[i] = t;
  }
  Element element;
  element.file = std::move(in.file);
  element.record = in.record;
  element.epoch = in.epoch;
  element.tensors.push_back(std::move(tokens));
  return element;
}

}  // namespace

MapFn make_token_map(TokenMapOptions options) {
  TANDEM_CHECK(options.length >= 2, ErrorCode::kInvalidArgument,
               "data.tokens.length {}: must be at least 2 (block size + 1: inputs and their next tokens)",
               options.length);
  TANDEM_CHECK(options.vocab_size >= 1, ErrorCode::kInvalidArgument, "data.tokens.vocab_size {}: must be at least 1",
               options.vocab_size);
  return [options](Element in) {
    const std::string file = in.file;
    const int64_t record = in.record;
    // One parser per loader thread: its feature lists keep their capacity from record to record.
    thread_local FastExampleParser parser({options.key});
    if (parser.key(0) != options.key) parser = FastExampleParser({options.key});
    try {
      return map_one(options, parser, std::move(in));
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{} record {}: {}", file, record, e.what()));
    }
  };
}

}  // namespace tandem::data
