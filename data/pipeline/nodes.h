// The dataset nodes behind Dataset's methods, one factory per operation. Internal to
// data/pipeline: users build pipelines through Dataset.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/pipeline/dataset.h"

namespace tandem::data::nodes {

using Node = std::shared_ptr<const DatasetNode>;

Node range(int64_t begin, int64_t end);
Node from_elements(std::vector<Element> elements);
Node from_files(std::vector<std::string> files, bool shuffle, uint64_t seed);
Node tfrecord(std::string path, TFRecordReaderOptions options);

Node shard(Node input, int64_t num_shards, int64_t index);
Node take(Node input, int64_t count);
Node skip(Node input, int64_t count);
Node repeat(Node input, int64_t count);
Node shuffle(Node input, int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration);
Node batch(Node input, int64_t batch_size, bool drop_remainder);
Node cache(Node input, std::string filename);
Node map(Node input, MapFn fn, int64_t num_parallel_calls, bool deterministic, std::string name);
Node interleave(Node input, InterleaveFn fn, int64_t cycle_length, int64_t block_length,
                int64_t num_parallel_calls, bool deterministic);
Node prefetch(Node input, int64_t buffer_size);
// A prefetch of buffer_size > 0 elements whose waits count under one stage (stats_key, name)
// however many are made: interleave's per-file read-ahead.
std::unique_ptr<Iterator> read_ahead_iterator(const Node& input, int64_t buffer_size, const void* stats_key,
                                              const std::string& name, const IteratorContext& ctx);

// Stacks the tensors of elements into one element of [N, ...] tensors (batch's work).
Element stack_elements(std::vector<Element>& elements);

// What a map's workers hand each result to, with its position in the map's output (0, 1, ...),
// before the result counts as done: batch has them copy their rows into the batch themselves.
using Placer = std::function<void(uint64_t position, Element& element)>;
// An iterator of `input` whose workers call `place`, when `input` is a map that runs on more than
// one thread and in order; else null (and no iterator is made). Its consumer is woken once per
// `group` results (the batch size), when all of them are done, not at each.
std::unique_ptr<Iterator> placing_map_iterator(const Node& input, const IteratorContext& ctx, Placer place,
                                               uint64_t group);

}  // namespace tandem::data::nodes
