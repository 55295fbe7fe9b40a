// The example's data: TFRecord files of tf.Examples {"tokens": L int64 ids, "label": int64}
// written by the example itself, and each replica's BatchSource over its share of them.
#pragma once

#include <tandem/tandem.h>

#include <filesystem>

namespace text {

struct TextDataSpec {
  int64_t sequence_length = 12;
  int64_t vocabulary = 64;
  int64_t classes = 4;
  int64_t examples = 512;
  int files = 4;
  uint64_t seed = 3;
};

// Writes DIR/train-0000i-of-0000n.tfrecord (made if missing) and returns their paths. A sequence
// of class c draws half its tokens from the band of ids [c V / C, (c + 1) V / C), the rest from
// the whole vocabulary: learnable, not trivial.
std::vector<std::string> write_tfrecords(const std::filesystem::path& dir, const TextDataSpec& spec);

// Replica `rank` of `replicas`: every replicas-th record of the files (the auto-shard by record),
// parsed into "tokens" (N, L) and "label" (N), shuffled per epoch from seed, in full batches.
std::unique_ptr<tandem::BatchSource> make_source(const std::vector<std::string>& files, int replicas, int rank,
                                                 int64_t per_replica_batch, uint64_t seed);

}  // namespace text
