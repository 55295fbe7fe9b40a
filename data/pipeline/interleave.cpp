// interleave(fn, cycle_length, block_length, num_parallel_calls): tf.data's order exactly
// (InterleaveDatasetOp): take block_length elements from each of cycle_length open inputs in
// turn, opening the next input element in a slot as soon as its iterator ends. With
// num_parallel_calls > 1 each open slot reads ahead on its own thread; the order is unchanged.
// With num_parallel_calls > 1 and deterministic=false, min(cycle_length, num_parallel_calls)
// threads each read one input at a time into a shared queue: elements come in the order they
// are read, so a slow file does not hold back the others (tf.data's "sloppy" order;
// block_length then does not apply). With num_parallel_calls = autotune, a ParallelismTuner
// decides how many of those threads read, up to that number.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "data/pipeline/autotune.h"
#include "data/pipeline/bounded_queue.h"
#include "data/pipeline/carried_error.h"
#include "data/pipeline/nodes.h"
#include "data/pipeline/stop_scope.h"
#include "engine/core/error.h"

namespace tandem::data::nodes {
namespace {

class InterleaveIterator final : public Iterator {
 public:
  InterleaveIterator(const Node& input, InterleaveFn fn, size_t cycle_length, int64_t block_length,
                     int64_t read_ahead, const IteratorContext& ctx)
      : ctx_(ctx), fn_(std::move(fn)), block_length_(block_length), read_ahead_(read_ahead),
        slots_(cycle_length) {
    input_ = input->make_iterator(ctx);
  }

  bool next(Element* out) override {
    while (!end_of_input_ || open_ > 0) {
      if (slots_[cycle_index_]) {
        if (slots_[cycle_index_]->next(out)) {
          if (++block_index_ == block_length_) advance();
          return true;
        }
        slots_[cycle_index_].reset();
        --open_;
        advance();
      } else if (!end_of_input_) {
        open_slot();
      } else {
        advance();
      }
    }
    return false;
  }

 private:
  void advance() {
    block_index_ = 0;
    cycle_index_ = (cycle_index_ + 1) % slots_.size();
  }

  void open_slot() {
    Element source;
    if (!input_->next(&source)) {
      end_of_input_ = true;
      return;
    }
    Dataset inner = fn_(source);
    slots_[cycle_index_] = read_ahead_ > 0
                               ? read_ahead_iterator(inner.node(), read_ahead_, &kReadAheadStage, "read-ahead", ctx_)
                               : inner.node()->make_iterator(ctx_);
    ++open_;
  }

  static constexpr int kReadAheadStage = 0;  // every file's read-ahead counts as one stage
  IteratorContext ctx_;
  InterleaveFn fn_;
  int64_t block_length_;
  int64_t read_ahead_;  // elements each slot reads ahead on its own thread; 0: none
  std::unique_ptr<Iterator> input_;
  std::vector<std::unique_ptr<Iterator>> slots_;
  size_t cycle_index_ = 0;
  int64_t block_index_ = 0;
  size_t open_ = 0;
  bool end_of_input_ = false;
};

class SloppyInterleaveIterator final : public Iterator {
 public:
  // threads: open inputs at most, each read by its own thread; learned: the node's tuned
  // thread count when num_parallel_calls is autotuned, else null.
  SloppyInterleaveIterator(const Node& input, InterleaveFn fn, int threads, size_t buffer,
                           std::shared_ptr<TunedValue> learned, const IteratorContext& ctx)
      : scope_(ctx.stop), ctx_(ctx), fn_(std::move(fn)), queue_(buffer, ctx.budget.queue_bytes),
        learned_(std::move(learned)),
        tuner_("interleave", threads, learned_ != nullptr, learned_ ? static_cast<int>(learned_->get()) : 0),
        active_(tuner_.active()), live_(threads) {
    ctx_.stop = scope_.token();
    input_ = input->make_iterator(ctx_);
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { work(i); });
  }

  ~SloppyInterleaveIterator() override {
    scope_.request_stop();
    for (std::thread& t : threads_) t.join();
  }

  bool next(Element* out) override {
    if (failed_) return false;
    Slot slot;
    auto start = std::chrono::steady_clock::now();
    if (!queue_.pop(&slot, scope_.token())) {
      if (scope_.token().stop_requested()) throw_stopped();
      return false;
    }
    admit_more(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (slot.error) {
      failed_ = true;  // an error ends the stream, as in every stage
      slot.error.rethrow();
    }
    *out = std::move(slot.element);
    return true;
  }

 private:
  struct Slot {
    Element element;
    CarriedError error;
  };

  // The consumer waited `waited` seconds: tell the tuner, and let more threads read if it says so.
  void admit_more(double waited) {
    if (!tuner_.record(waited)) return;
    std::lock_guard lock(pull_mutex_);
    active_ = tuner_.active();
    learned_->raise(active_);
    admitted_.notify_all();
  }

  // One open input at a time per thread; the last thread to finish closes the queue.
  void work(int index) {
    std::stop_token stop = scope_.token();
    try {
      Element source;
      while (!stop.stop_requested() && pull(index, &source)) {
        std::unique_ptr<Iterator> inner = fn_(source).node()->make_iterator(ctx_);
        Slot slot;
        while (inner->next(&slot.element)) {
          size_t bytes = slot.element.bytes();
          if (!queue_.push(std::move(slot), bytes, stop)) break;
          slot = Slot{};
        }
      }
    } catch (...) {
      queue_.push(Slot{Element{}, CarriedError::capture()}, 0, stop);
    }
    if (live_.fetch_sub(1) == 1) queue_.close();
  }

  // Threads above the tuned count wait here, between inputs, until the tuner admits them.
  bool pull(int index, Element* source) {
    std::unique_lock lock(pull_mutex_);
    if (!admitted_.wait(lock, scope_.token(), [&] { return input_done_ || index < active_; }) || input_done_) {
      return false;
    }
    input_done_ = true;  // stays set when next() throws: that error ends the input for all threads
    admitted_.notify_all();  // waiting threads see the final state once this one unlocks
    if (!input_->next(source)) return false;
    input_done_ = false;
    return true;
  }

  StopScope scope_;
  IteratorContext ctx_;  // with this stage's stop token
  InterleaveFn fn_;
  BoundedQueue<Slot> queue_;
  std::shared_ptr<TunedValue> learned_;
  ParallelismTuner tuner_;  // the consumer's thread only
  std::mutex pull_mutex_;   // serializes input_->next; guards input_done_ and active_
  std::condition_variable_any admitted_;
  std::unique_ptr<Iterator> input_;
  bool input_done_ = false;
  int active_;  // threads with index < active_ may open inputs
  bool failed_ = false;
  std::atomic<int> live_;
  std::vector<std::thread> threads_;
};

class InterleaveNode final : public DatasetNode {
 public:
  InterleaveNode(Node input, InterleaveFn fn, int64_t cycle_length, int64_t block_length, int64_t parallel,
                 bool deterministic)
      : input_(std::move(input)), fn_(std::move(fn)), cycle_length_(cycle_length), block_length_(block_length),
        parallel_(parallel), deterministic_(deterministic), learned_(std::make_shared<TunedValue>()) {}

  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    int64_t cycle = cycle_length_ == kAutotune ? resolve_parallelism(kAutotune, ctx.budget, "interleave cycle_length")
                                               : cycle_length_;
    int parallel = resolve_parallelism(parallel_, ctx.budget, "interleave");
    // Reading ahead a few blocks per slot keeps the consumer from waiting on file reads.
    int64_t read_ahead = parallel > 1 ? std::max<int64_t>(block_length_ * 2, 16) : 0;
    if (parallel > 1 && !deterministic_) {
      // One thread per open input, as many as both cycle_length and num_parallel_calls allow.
      int threads = static_cast<int>(std::min<int64_t>(cycle, parallel));
      return std::make_unique<SloppyInterleaveIterator>(input_, fn_, threads,
                                                        static_cast<size_t>(read_ahead * threads),
                                                        parallel_ == kAutotune ? learned_ : nullptr, ctx);
    }
    return std::make_unique<InterleaveIterator>(input_, fn_, static_cast<size_t>(cycle), block_length_, read_ahead,
                                                ctx);
  }

 private:
  Node input_;
  InterleaveFn fn_;
  int64_t cycle_length_, block_length_, parallel_;
  bool deterministic_;
  std::shared_ptr<TunedValue> learned_;  // autotune, sloppy order: the thread count last reached
};

}  // namespace

Node interleave(Node input, InterleaveFn fn, int64_t cycle_length, int64_t block_length, int64_t num_parallel_calls,
                bool deterministic) {
  TANDEM_CHECK(fn != nullptr, ErrorCode::kInvalidArgument, "interleave: no function given");
  TANDEM_CHECK(cycle_length >= 1 || cycle_length == kAutotune, ErrorCode::kInvalidArgument,
               "interleave(cycle_length={}): must be >= 1 or autotune", cycle_length);
  TANDEM_CHECK(block_length >= 1, ErrorCode::kInvalidArgument, "interleave(block_length={}): must be >= 1",
               block_length);
  return std::make_shared<InterleaveNode>(std::move(input), std::move(fn), cycle_length, block_length,
                                          num_parallel_calls, deterministic);
}

}  // namespace tandem::data::nodes
