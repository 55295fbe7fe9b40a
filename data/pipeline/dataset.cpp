// Dataset's methods (thin: each wraps a node from nodes.h), the user-facing iterator that owns
// the stop source of its tree, and the autotune rule for thread counts.
#include "data/pipeline/dataset.h"

#include <glob.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "data/pipeline/nodes.h"
#include "engine/core/context.h"
#include "engine/core/error.h"

namespace tandem::data {

void throw_stopped() { throw_error(ErrorCode::kAborted, "input pipeline stopped"); }

int resolve_parallelism(int64_t requested, const PipelineBudget& budget, const std::string& stage) {
  if (requested != kAutotune) {
    TANDEM_CHECK(requested >= 1, ErrorCode::kInvalidArgument,
                 "{}: num_parallel_calls must be >= 1 or autotune, got {}", stage, requested);
    return static_cast<int>(requested);
  }
  int cores = budget.cpu_threads > 0 ? budget.cpu_threads : available_cores();
  spdlog::debug("autotune: {} num_parallel_calls = {} (cpu budget {} threads)", stage, cores, cores);
  return cores;
}

DatasetIterator::DatasetIterator(std::shared_ptr<const DatasetNode> node, int64_t epoch, PipelineBudget budget)
    : stop_(std::make_unique<std::stop_source>()), stats_(std::make_shared<PipelineStats>()) {
  IteratorContext ctx{stop_->get_token(), epoch, stats_, budget};
  root_ = node->make_iterator(ctx);
}

DatasetIterator::~DatasetIterator() {
  // Wake every blocked thread first; each stage's destructor then joins its own threads.
  if (stop_) {
    stop_->request_stop();
  }
  root_.reset();
}

bool DatasetIterator::next(Element* out) {
  TANDEM_CHECK(root_ != nullptr, ErrorCode::kFailedPrecondition, "next() on a moved-from DatasetIterator");
  return root_->next(out);
}

Dataset Dataset::range(int64_t begin, int64_t end) { return Dataset(nodes::range(begin, end)); }
Dataset Dataset::from_elements(std::vector<Element> elements) {
  return Dataset(nodes::from_elements(std::move(elements)));
}

Dataset Dataset::list_files(const std::string& pattern, bool shuffle, uint64_t seed) {
  glob_t matches{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> files;
  for (size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) {
    files.emplace_back(matches.gl_pathv[i]);
  }
  globfree(&matches);
  TANDEM_CHECK(!files.empty(), ErrorCode::kNotFound, "list_files: no file matches '{}'", pattern);
  std::sort(files.begin(), files.end());
  return from_files(std::move(files), shuffle, seed);
}

Dataset Dataset::from_files(std::vector<std::string> files, bool shuffle, uint64_t seed) {
  return Dataset(nodes::from_files(std::move(files), shuffle, seed));
}
Dataset Dataset::tfrecord(std::string path, TFRecordReaderOptions options) {
  return Dataset(nodes::tfrecord(std::move(path), std::move(options)));
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  return Dataset(nodes::shard(node_, num_shards, index));
}
Dataset Dataset::interleave(InterleaveFn fn, int64_t cycle_length, int64_t block_length,
                            int64_t num_parallel_calls, bool deterministic) const {
  return Dataset(nodes::interleave(node_, std::move(fn), cycle_length, block_length, num_parallel_calls,
                                   deterministic));
}
Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  return Dataset(nodes::shuffle(node_, buffer_size, seed, reshuffle_each_iteration));
}
Dataset Dataset::map(MapFn fn, int64_t num_parallel_calls, bool deterministic, std::string name) const {
  return Dataset(nodes::map(node_, std::move(fn), num_parallel_calls, deterministic, std::move(name)));
}
Dataset Dataset::cache(std::string filename) const { return Dataset(nodes::cache(node_, std::move(filename))); }
Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  return Dataset(nodes::batch(node_, batch_size, drop_remainder));
}
Dataset Dataset::prefetch(int64_t buffer_size) const { return Dataset(nodes::prefetch(node_, buffer_size)); }
Dataset Dataset::repeat(int64_t count) const { return Dataset(nodes::repeat(node_, count)); }
Dataset Dataset::take(int64_t count) const { return Dataset(nodes::take(node_, count)); }
Dataset Dataset::skip(int64_t count) const { return Dataset(nodes::skip(node_, count)); }

DatasetIterator Dataset::make_iterator(int64_t epoch, PipelineBudget budget) const {
  return DatasetIterator(node_, epoch, budget);
}

}  // namespace tandem::data
