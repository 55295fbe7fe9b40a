#include "text_data.h"

#include <fmt/format.h>

namespace text {

using tandem::data::Dataset;
using tandem::data::Element;
using tandem::data::Feature;

std::vector<std::string> write_tfrecords(const std::filesystem::path& dir, const TextDataSpec& spec) {
  std::filesystem::create_directories(dir);
  tandem::Generator g(spec.seed);
  std::vector<std::string> files;
  const int64_t band = spec.vocabulary / spec.classes;
  for (int f = 0; f < spec.files; ++f) {
    files.push_back((dir / fmt::format("train-{:05d}-of-{:05d}.tfrecord", f, spec.files)).string());
    tandem::data::TFRecordWriter writer(files.back());
    for (int64_t i = f; i < spec.examples; i += spec.files) {
      const int64_t label = static_cast<int64_t>(g.below(static_cast<uint64_t>(spec.classes)));
      std::vector<int64_t> tokens;
      for (int64_t t = 0; t < spec.sequence_length; ++t) {
        const bool in_band = t % 2 == 0;
        tokens.push_back(in_band ? label * band + static_cast<int64_t>(g.below(static_cast<uint64_t>(band)))
                                 : static_cast<int64_t>(g.below(static_cast<uint64_t>(spec.vocabulary))));
      }
      writer.write(tandem::data::serialize_example(
          {{"tokens", Feature::of_ints(std::move(tokens))}, {"label", Feature::of_ints({label})}}));
    }
    writer.close();
  }
  return files;
}

namespace {

Element parse(Element e) {
  tandem::data::FeatureMap features = tandem::data::parse_example(e.text);
  const std::vector<int64_t>& ids = features.at("tokens").ints;
  tandem::Tensor tokens = tandem::Tensor::empty({static_cast<int64_t>(ids.size())}, tandem::DType::kI64);
  std::copy(ids.begin(), ids.end(), tokens.data<int64_t>());
  e.tensors = {tokens, tandem::data::scalar_i64(features.at("label").ints.at(0))};
  e.text.clear();
  return e;
}

}  // namespace

std::unique_ptr<tandem::BatchSource> make_source(const std::vector<std::string>& files, int replicas, int rank,
                                                 int64_t per_replica_batch, uint64_t seed) {
  Dataset records = Dataset::from_files(files)
                        .interleave([](const Element& file) { return Dataset::tfrecord(file.text); }, 1)
                        .shard(replicas, rank)
                        .map(parse)
                        .shuffle(256, seed)
                        .batch(per_replica_batch, /*drop_remainder=*/true);
  return std::make_unique<tandem::data::PipelineBatchSource>(records, std::vector<std::string>{"tokens", "label"});
}

}  // namespace text
