// map(fn, num_parallel_calls, deterministic): workers pull inputs in turn (numbered in pull
// order), apply fn in parallel, and the consumer takes results in that order, or in any
// order when not deterministic. In-flight work is bounded in count and buffered bytes.
// Each side is woken only when it can go on (the consumer when the result it waits for is in,
// workers when a slot frees): on a machine with as many cores as workers, every needless
// wake-up takes a core from a worker.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "data/pipeline/autotune.h"
#include "data/pipeline/carried_error.h"
#include "data/pipeline/nodes.h"
#include "data/pipeline/stop_scope.h"
#include "engine/core/error.h"

namespace tandem::data::nodes {
namespace {

// Results a worker may run ahead of the consumer: enough that a consumer held up for a moment
// (stacking a batch, or waiting for a core) does not stop the workers.
constexpr size_t kInFlightPerThread = 4;

struct Result {
  Element element;
  CarriedError error;
  size_t bytes = 0;
};

class ParallelMapIterator final : public Iterator {
 public:
  // learned: the node's tuned thread count when autotuned (null for a fixed count).
  // place: null, or what the workers hand each result to with its position (map_and_batch);
  // group: then the batch size, else 1. The consumer is woken once per group of results, when
  // all of them are done, so there must be room for a group in flight besides the workers' own.
  ParallelMapIterator(const Node& input, MapFn fn, int threads, std::shared_ptr<TunedValue> learned,
                      bool deterministic, const IteratorContext& ctx, std::shared_ptr<StageStats> stats,
                      const std::string& name, Placer place, uint64_t group)
      : scope_(ctx.stop), fn_(std::move(fn)), place_(std::move(place)), deterministic_(deterministic),
        group_(deterministic ? group : 1),
        capacity_(static_cast<size_t>(threads) * kInFlightPerThread + (group_ > 1 ? group_ : 0)),
        max_bytes_(ctx.budget.queue_bytes), stats_(std::move(stats)),
        learned_(std::move(learned)),
        tuner_(name, threads, learned_ != nullptr, learned_ ? static_cast<int>(learned_->get()) : 0) {
    stats_->parallelism = tuner_.active();
    IteratorContext child = ctx;
    child.stop = scope_.token();
    input_ = input->make_iterator(child);
    // Every thread of the budget starts; those above the tuner's count wait until it grows.
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { work(i); });
  }

  ~ParallelMapIterator() override {
    scope_.request_stop();
    for (std::thread& t : threads_) t.join();
  }

  bool next(Element* out) override {
    std::unique_lock lock(mutex_);
    if (failed_) return false;
    auto ready = [&] {
      return (deterministic_ ? done_prefix_ >= group_end() : !done_.empty()) || (input_done_ && consumed_ == end_seq_);
    };
    double waited = 0;
    if (!ready()) {
      auto start = std::chrono::steady_clock::now();
      if (!ready_.wait(lock, scope_.token(), ready)) throw_stopped();
      waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      stats_->consumer_wait_ns.fetch_add(static_cast<int64_t>(waited * 1e9), std::memory_order_relaxed);
    }
    if (tuner_.record(waited)) {
      stats_->parallelism = tuner_.active();
      learned_->raise(tuner_.active());
      room_.notify_all();
    }
    if (done_.empty() || (deterministic_ && done_.count(consumed_) == 0)) return false;  // the end
    auto it = deterministic_ ? done_.find(consumed_) : done_.begin();
    Result result = std::move(it->second);
    done_.erase(it);
    ++consumed_;
    --in_flight_;
    buffered_bytes_ -= result.bytes;
    room_.notify_all();
    if (result.error) {
      failed_ = true;  // an error ends the stream: later calls see its end, never a hang
      result.error.rethrow();
    }
    *out = std::move(result.element);
    return true;
  }

 private:
  // Reserves a slot; false when the input is done or the pipeline stops.
  bool reserve(int index) {
    StageTimer wait(&stats_->producer_wait_ns);
    std::unique_lock lock(mutex_);
    bool ok = room_.wait(lock, scope_.token(), [&] {
      // The consumer's group is always let in whole, whatever the bytes: it waits for all of it.
      return input_done_ || (index < tuner_.active() && in_flight_ < capacity_ &&
                             (buffered_bytes_ < max_bytes_ || done_.empty() || in_flight_ < group_end() - consumed_));
    });
    if (!ok || input_done_) return false;
    ++in_flight_;
    return true;
  }

  void release_unused() {
    std::lock_guard lock(mutex_);
    --in_flight_;
    room_.notify_all();
  }

  void work(int index) {
    while (reserve(index)) {
      Element in;
      Result result;
      uint64_t seq = 0;
      bool got = false;
      {
        // Inputs are pulled one at a time, so numbering them here keeps the input's order.
        StageTimer wait(&stats_->input_wait_ns);
        std::lock_guard pull(pull_mutex_);
        if (pulled_end_) {
          release_unused();
          return;
        }
        try {
          got = input_->next(&in);
        } catch (...) {
          result.error = CarriedError::capture();
        }
        seq = next_seq_++;
        if (!got) {
          pulled_end_ = true;
          finish_input(result.error ? seq + 1 : seq);
          if (!result.error) {
            release_unused();
            return;
          }
        }
      }
      if (got) apply(seq, std::move(in), &result);
      publish(seq, std::move(result));
    }
  }

  void apply(uint64_t seq, Element in, Result* result) {
    try {
      BusyTimer timer(stats_.get());
      result->element = fn_(std::move(in));
      if (place_) place_(seq, result->element);
      result->bytes = result->element.bytes();
      stats_->elements.fetch_add(1, std::memory_order_relaxed);
    } catch (...) {
      result->error = CarriedError::capture();
    }
  }

  void finish_input(uint64_t end_seq) {
    std::lock_guard lock(mutex_);
    input_done_ = true;
    end_seq_ = end_seq;
    ready_.notify_all();  // the last group may be short
    room_.notify_all();
  }

  void publish(uint64_t seq, Result result) {
    std::lock_guard lock(mutex_);
    buffered_bytes_ += result.bytes;
    done_.emplace(seq, std::move(result));
    while (done_.count(done_prefix_) > 0) ++done_prefix_;
    // In order, the consumer goes on once every result of its group is done: with groups of one,
    // once the result it takes next is.
    if (!deterministic_ || done_prefix_ >= group_end()) ready_.notify_one();
  }

  // The end of the group the consumer's next result belongs to (the end of the input at most).
  uint64_t group_end() const {
    uint64_t end = (consumed_ / group_ + 1) * group_;
    return input_done_ ? std::min(end, end_seq_) : end;
  }

  StopScope scope_;
  MapFn fn_;
  Placer place_;
  const bool deterministic_;
  const uint64_t group_;
  const size_t capacity_;
  const size_t max_bytes_;
  std::shared_ptr<StageStats> stats_;
  std::unique_ptr<Iterator> input_;

  std::mutex pull_mutex_;  // serializes input_->next and numbering
  uint64_t next_seq_ = 0;
  bool pulled_end_ = false;

  std::mutex mutex_;  // guards everything below
  std::condition_variable_any ready_;  // the consumer waits here for a result
  std::condition_variable_any room_;   // workers wait here for a slot
  std::map<uint64_t, Result> done_;
  uint64_t consumed_ = 0;
  uint64_t done_prefix_ = 0;  // every result before it is done (deterministic order)
  uint64_t end_seq_ = 0;
  bool input_done_ = false;
  bool failed_ = false;
  size_t in_flight_ = 0;  // reserved and not yet consumed
  size_t buffered_bytes_ = 0;
  std::shared_ptr<TunedValue> learned_;
  ParallelismTuner tuner_;
  std::vector<std::thread> threads_;
};

class MapNode final : public DatasetNode {
 public:
  MapNode(Node input, MapFn fn, int64_t parallel, bool deterministic, std::string name)
      : input_(std::move(input)), fn_(std::move(fn)), parallel_(parallel), deterministic_(deterministic),
        name_(std::move(name)), learned_(std::make_shared<TunedValue>()) {}

  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    return make_placing_iterator(ctx, nullptr, 1);
  }

  // With place: null unless the map runs on threads and in order (placing_map_iterator).
  std::unique_ptr<Iterator> make_placing_iterator(const IteratorContext& ctx, Placer place, uint64_t group) const {
    auto stats = ctx.stats ? ctx.stats->stage(this, name_) : std::make_shared<StageStats>(name_);
    int threads = resolve_parallelism(parallel_, ctx.budget, name_);
    stats->parallelism = threads;
    if (place && (threads <= 1 || !deterministic_)) return nullptr;
    if (threads > 1) {
      return std::make_unique<ParallelMapIterator>(input_, fn_, threads, parallel_ == kAutotune ? learned_ : nullptr,
                                                   deterministic_, ctx, std::move(stats), name_, std::move(place),
                                                   group);
    }
    // One call at a time runs in the puller's thread, as tf.data does.
    struct It final : Iterator {
      std::unique_ptr<Iterator> input;
      MapFn fn;
      std::shared_ptr<StageStats> stats;
      bool next(Element* out) override {
        Element in;
        if (!input->next(&in)) return false;
        BusyTimer timer(stats.get());
        *out = fn(std::move(in));
        stats->elements.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->input = input_->make_iterator(ctx);
    it->fn = fn_;
    it->stats = std::move(stats);
    return it;
  }

 private:
  Node input_;
  MapFn fn_;
  int64_t parallel_;
  bool deterministic_;
  std::string name_;
  std::shared_ptr<TunedValue> learned_;  // autotune: the thread count the last iterator got to
};

}  // namespace

std::unique_ptr<Iterator> placing_map_iterator(const Node& input, const IteratorContext& ctx, Placer place,
                                               uint64_t group) {
  const auto* map = dynamic_cast<const MapNode*>(input.get());
  return map != nullptr ? map->make_placing_iterator(ctx, std::move(place), group) : nullptr;
}

Node map(Node input, MapFn fn, int64_t num_parallel_calls, bool deterministic, std::string name) {
  TANDEM_CHECK(fn != nullptr, ErrorCode::kInvalidArgument, "map: no function given");
  return std::make_shared<MapNode>(std::move(input), std::move(fn), num_parallel_calls, deterministic, std::move(name));
}

}  // namespace tandem::data::nodes
