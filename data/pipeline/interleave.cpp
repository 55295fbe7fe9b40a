// interleave(fn, cycle_length, block_length, num_parallel_calls): tf.data's order exactly
// (InterleaveDatasetOp): take block_length elements from each of cycle_length open inputs in
// turn, opening the next input element in a slot as soon as its iterator ends. With
// num_parallel_calls > 1 each open slot reads ahead on its own thread; the order is unchanged.
#include <algorithm>

#include "data/pipeline/nodes.h"
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
    if (read_ahead_ > 0) inner = inner.prefetch(read_ahead_);
    slots_[cycle_index_] = inner.node()->make_iterator(ctx_);
    ++open_;
  }

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

class InterleaveNode final : public DatasetNode {
 public:
  InterleaveNode(Node input, InterleaveFn fn, int64_t cycle_length, int64_t block_length, int64_t parallel)
      : input_(std::move(input)), fn_(std::move(fn)), cycle_length_(cycle_length), block_length_(block_length),
        parallel_(parallel) {}

  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    int64_t cycle = cycle_length_ == kAutotune ? resolve_parallelism(kAutotune, ctx.budget, "interleave cycle_length")
                                               : cycle_length_;
    int parallel = resolve_parallelism(parallel_, ctx.budget, "interleave");
    // Reading ahead a few blocks per slot keeps the consumer from waiting on file reads.
    int64_t read_ahead = parallel > 1 ? std::max<int64_t>(block_length_ * 2, 16) : 0;
    return std::make_unique<InterleaveIterator>(input_, fn_, static_cast<size_t>(cycle), block_length_, read_ahead,
                                                ctx);
  }

 private:
  Node input_;
  InterleaveFn fn_;
  int64_t cycle_length_, block_length_, parallel_;
};

}  // namespace

Node interleave(Node input, InterleaveFn fn, int64_t cycle_length, int64_t block_length, int64_t num_parallel_calls,
                bool deterministic) {
  (void)deterministic;  // the order is always tf.data's deterministic order (docs/PIPELINE.md)
  TANDEM_CHECK(fn != nullptr, ErrorCode::kInvalidArgument, "interleave: no function given");
  TANDEM_CHECK(cycle_length >= 1 || cycle_length == kAutotune, ErrorCode::kInvalidArgument,
               "interleave(cycle_length={}): must be >= 1 or autotune", cycle_length);
  TANDEM_CHECK(block_length >= 1, ErrorCode::kInvalidArgument, "interleave(block_length={}): must be >= 1",
               block_length);
  return std::make_shared<InterleaveNode>(std::move(input), std::move(fn), cycle_length, block_length,
                                          num_parallel_calls);
}

}  // namespace tandem::data::nodes
