// prefetch(buffer_size): one thread pulls from the input into a queue bounded in elements and
// bytes, so the consumer finds the next element ready. Errors travel through the queue.
// prefetch(autotune) starts at kAutotunedPrefetch elements (or where the node's last iterator
// got to) and grows (BufferTuner) while the consumer waits although the queue had filled, up to
// the queue's share of the memory budget.
#include <algorithm>
#include <chrono>
#include <thread>

#include "data/pipeline/autotune.h"
#include "data/pipeline/bounded_queue.h"
#include "data/pipeline/carried_error.h"
#include "data/pipeline/nodes.h"
#include "data/pipeline/stop_scope.h"
#include "engine/core/error.h"

namespace tandem::data::nodes {
namespace {

constexpr int64_t kAutotunedPrefetch = 4;  // the start; bounded by the byte budget as well

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Slot {
  Element element;
  CarriedError error;
};

class PrefetchIterator final : public Iterator {
 public:
  // learned: the node's tuned size when autotuned (null for a fixed buffer_size).
  // stats_key, name: the stage its waits are counted under (one per node, or one shared by the
  // read-ahead of every file an interleave opens).
  PrefetchIterator(const Node& input, size_t buffer_size, std::shared_ptr<TunedValue> learned,
                   const IteratorContext& ctx, const void* stats_key, const std::string& name)
      : scope_(ctx.stop), queue_(buffer_size, ctx.budget.queue_bytes), learned_(std::move(learned)),
        tuner_(name, buffer_size, ctx.budget.queue_bytes, learned_ != nullptr) {
    IteratorContext child = ctx;
    child.stop = scope_.token();
    input_ = input->make_iterator(child);
    // Registered after the input's stages, so a snapshot lists stages from the source outwards.
    stats_ = ctx.stats ? ctx.stats->stage(stats_key, name) : std::make_shared<StageStats>(name);
    thread_ = std::thread([this] { produce(); });
  }

  ~PrefetchIterator() override {
    scope_.request_stop();
    thread_.join();
  }

  bool next(Element* out) override {
    if (failed_) return false;
    Slot slot;
    double start = seconds_now();
    if (!queue_.pop(&slot, scope_.token())) {
      if (scope_.token().stop_requested()) throw_stopped();
      return false;
    }
    double now = seconds_now();
    stats_->consumer_wait_ns.fetch_add(static_cast<int64_t>((now - start) * 1e9), std::memory_order_relaxed);
    if (tuner_.record(now - start, slot.element.bytes(), queue_.take_filled(), now)) {
      queue_.set_max_elements(tuner_.size());
      learned_->raise(static_cast<int64_t>(tuner_.size()));
    }
    if (slot.error) {
      failed_ = true;
      slot.error.rethrow();
    }
    *out = std::move(slot.element);
    return true;
  }

 private:
  void produce() {
    std::stop_token stop = scope_.token();
    try {
      Slot slot;
      while (!stop.stop_requested() && input_->next(&slot.element)) {
        size_t bytes = slot.element.bytes();
        StageTimer wait(&stats_->producer_wait_ns);
        if (!queue_.push(std::move(slot), bytes, stop)) break;
        slot = Slot{};
      }
    } catch (...) {
      Slot failed{Element{}, CarriedError::capture()};
      queue_.push(std::move(failed), 0, stop);
    }
    queue_.close();
  }

  StopScope scope_;
  BoundedQueue<Slot> queue_;
  std::unique_ptr<Iterator> input_;
  bool failed_ = false;
  std::shared_ptr<StageStats> stats_;
  std::shared_ptr<TunedValue> learned_;
  BufferTuner tuner_;  // used by the consumer's thread only
  std::thread thread_;
};

class PrefetchNode final : public DatasetNode {
 public:
  PrefetchNode(Node input, int64_t buffer_size)
      : input_(std::move(input)), buffer_size_(buffer_size), learned_(std::make_shared<TunedValue>()) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    const bool autotune = buffer_size_ == kAutotune;
    int64_t size = autotune ? std::max(kAutotunedPrefetch, learned_->get()) : buffer_size_;
    if (size == 0) return input_->make_iterator(ctx);
    return std::make_unique<PrefetchIterator>(input_, static_cast<size_t>(size), autotune ? learned_ : nullptr, ctx,
                                              this, "prefetch");
  }

 private:
  Node input_;
  int64_t buffer_size_;
  std::shared_ptr<TunedValue> learned_;  // autotune: the size the last iterator got to
};

}  // namespace

std::unique_ptr<Iterator> read_ahead_iterator(const Node& input, int64_t buffer_size, const void* stats_key,
                                              const std::string& name, const IteratorContext& ctx) {
  return std::make_unique<PrefetchIterator>(input, static_cast<size_t>(buffer_size), nullptr, ctx, stats_key, name);
}

Node prefetch(Node input, int64_t buffer_size) {
  TANDEM_CHECK(buffer_size >= 0 || buffer_size == kAutotune, ErrorCode::kInvalidArgument,
               "prefetch(buffer_size={}): must be >= 0 or autotune", buffer_size);
  return std::make_shared<PrefetchNode>(std::move(input), buffer_size);
}

}  // namespace tandem::data::nodes
