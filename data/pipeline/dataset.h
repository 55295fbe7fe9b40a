// Dataset: a tf.data-style description of an input pipeline, with tf.data's operation and
// parameter names. A Dataset is immutable and cheap to copy; make_iterator() starts the
// threads of its parallel stages, and destroying the iterator stops and joins all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "data/pipeline/element.h"
#include "data/pipeline/stage_stats.h"
#include "data/tfrecord_reader.h"

namespace tandem::data {

// Accepted wherever a count is asked: the pipeline picks the value (docs/PIPELINE.md, autotune).
inline constexpr int64_t kAutotune = -1;
inline constexpr int64_t kInfinite = -1;  // repeat(kInfinite)

// Limits shared by every stage of one iterator: how many threads a parallel stage may use
// when autotuned, and how many bytes one queue may hold.
struct PipelineBudget {
  int cpu_threads = 0;                     // 0: the cores this process may run on
  size_t queue_bytes = size_t{256} << 20;  // per queue; at least one element is always admitted
};

// What every iterator of a tree shares: the stop token (fired when the tree is destroyed),
// the epoch, the stage counters and the budget.
struct IteratorContext {
  std::stop_token stop;
  int64_t epoch = 0;
  std::shared_ptr<PipelineStats> stats;
  PipelineBudget budget;
};

// Pulls elements. next() returns false at the end; any error of any stage is thrown here,
// in the consumer's thread, as the tandem::Error the stage raised (file and offset included).
class Iterator {
 public:
  virtual ~Iterator() = default;
  virtual bool next(Element* out) = 0;
};

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const = 0;
};

using MapFn = std::function<Element(Element)>;
using InterleaveFn = std::function<class Dataset(const Element&)>;

// The iterator handed to users: owns the tree and its stop source; destroying it mid-epoch
// fires the stop token first, so blocked threads wake, then joins them.
class DatasetIterator {
 public:
  DatasetIterator(std::shared_ptr<const DatasetNode> node, int64_t epoch, PipelineBudget budget);
  ~DatasetIterator();
  DatasetIterator(DatasetIterator&&) = default;
  DatasetIterator& operator=(DatasetIterator&&) = default;

  bool next(Element* out);
  const std::shared_ptr<PipelineStats>& stats() const { return stats_; }

 private:
  std::unique_ptr<std::stop_source> stop_;
  std::shared_ptr<PipelineStats> stats_;
  std::unique_ptr<Iterator> root_;
};

class Dataset {
 public:
  explicit Dataset(std::shared_ptr<const DatasetNode> node) : node_(std::move(node)) {}

  // Sources.
  static Dataset range(int64_t begin, int64_t end);  // element.record = value
  static Dataset from_elements(std::vector<Element> elements);
  // Files matching a glob pattern, sorted by name, then shuffled with seed when asked
  // (reshuffled each iteration, as tf.data's list_files).
  static Dataset list_files(const std::string& pattern, bool shuffle = false, uint64_t seed = 0);
  static Dataset from_files(std::vector<std::string> files, bool shuffle = false, uint64_t seed = 0);
  // The records of one TFRecord file; element.file/record say where each came from.
  static Dataset tfrecord(std::string path, TFRecordReaderOptions options = {});

  // Transformations, as tf.data.
  Dataset shard(int64_t num_shards, int64_t index) const;
  // deterministic=false with num_parallel_calls > 1: elements in the order they are read.
  Dataset interleave(InterleaveFn fn, int64_t cycle_length, int64_t block_length = 1,
                     int64_t num_parallel_calls = 1, bool deterministic = true) const;
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  Dataset map(MapFn fn, int64_t num_parallel_calls = 1, bool deterministic = true,
              std::string name = "map") const;
  // The first complete pass, replayed by later passes: in memory when filename is empty, else
  // in a cache file (cache_file.h) that later runs and processes read instead of the input.
  Dataset cache(std::string filename = "") const;
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  Dataset prefetch(int64_t buffer_size) const;
  Dataset repeat(int64_t count = kInfinite) const;
  Dataset take(int64_t count) const;
  Dataset skip(int64_t count) const;

  DatasetIterator make_iterator(int64_t epoch = 0, PipelineBudget budget = {}) const;
  const std::shared_ptr<const DatasetNode>& node() const { return node_; }

 private:
  std::shared_ptr<const DatasetNode> node_;
};

// The stop token's exception: stages throw it when the pipeline is being torn down.
[[noreturn]] void throw_stopped();
// Resolves kAutotune for a thread count against the budget; logs the choice once per stage.
int resolve_parallelism(int64_t requested, const PipelineBudget& budget, const std::string& stage);

}  // namespace tandem::data
