// The sequential transformations: shard, take, skip, repeat and shuffle. They run in the
// thread of whoever pulls from them (a prefetch or map thread in a real pipeline).

#include "data/pipeline/nodes.h"
#include "engine/core/error.h"
#include "engine/core/random.h"

namespace tandem::data::nodes {
namespace {

// A node with one input and a per-iterator step function; keeps each operation short.
template <typename State, typename Step>
class SimpleNode final : public DatasetNode {
 public:
  SimpleNode(Node input, State initial, Step step) : input_(std::move(input)), initial_(initial), step_(step) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    struct It final : Iterator {
      std::unique_ptr<Iterator> input;
      State state;
      Step step;
      It(std::unique_ptr<Iterator> in, State s, Step f) : input(std::move(in)), state(s), step(f) {}
      bool next(Element* out) override { return step(*input, state, out); }
    };
    return std::make_unique<It>(input_->make_iterator(ctx), initial_, step_);
  }

 private:
  Node input_;
  State initial_;
  Step step_;
};

template <typename State, typename Step>
Node simple(Node input, State initial, Step step) {
  return std::make_shared<SimpleNode<State, Step>>(std::move(input), initial, step);
}

class RepeatNode final : public DatasetNode {
 public:
  RepeatNode(Node input, int64_t count) : input_(std::move(input)), count_(count) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    struct It final : Iterator {
      Node node;
      IteratorContext ctx;
      int64_t count, pass = 0, in_pass = 0;
      std::unique_ptr<Iterator> input;
      bool next(Element* out) override {
        while (count == kInfinite || pass < count) {
          if (!input) {
            // Each pass is the next epoch: shuffles reshuffle and augmentations draw anew.
            IteratorContext pass_ctx = ctx;
            pass_ctx.epoch = ctx.epoch + pass;
            input = node->make_iterator(pass_ctx);
            in_pass = 0;
          }
          if (input->next(out)) {
            ++in_pass;
            return true;
          }
          input.reset();
          ++pass;
          if (in_pass == 0) return false;  // an empty input would repeat forever
        }
        return false;
      }
    };
    auto it = std::make_unique<It>();
    it->node = input_;
    it->ctx = ctx;
    it->count = count_;
    return it;
  }

 private:
  Node input_;
  int64_t count_;
};

// tf.data's algorithm: fill a buffer, hand out a random slot, refill that slot from the input.
class ShuffleNode final : public DatasetNode {
 public:
  ShuffleNode(Node input, int64_t buffer_size, uint64_t seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    struct It final : Iterator {
      std::unique_ptr<Iterator> input;
      Generator rng;
      size_t capacity;
      std::vector<Element> buffer;
      bool input_done = false;
      It(std::unique_ptr<Iterator> in, Generator g, size_t cap) : input(std::move(in)), rng(g), capacity(cap) {}
      bool next(Element* out) override {
        while (!input_done && buffer.size() < capacity) {
          Element e;
          if (!input->next(&e)) {
            input_done = true;
            break;
          }
          buffer.push_back(std::move(e));
        }
        if (buffer.empty()) return false;
        size_t pick = rng.below(buffer.size());
        *out = std::move(buffer[pick]);
        buffer[pick] = std::move(buffer.back());
        buffer.pop_back();
        return true;
      }
    };
    Generator rng(seed_, reshuffle_ ? static_cast<uint64_t>(ctx.epoch) : 0);
    return std::make_unique<It>(input_->make_iterator(ctx), rng, static_cast<size_t>(buffer_size_));
  }

 private:
  Node input_;
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
};

}  // namespace

Node shard(Node input, int64_t num_shards, int64_t index) {
  TANDEM_CHECK(num_shards >= 1 && index >= 0 && index < num_shards, ErrorCode::kInvalidArgument,
               "shard(num_shards={}, index={}): need num_shards >= 1 and 0 <= index < num_shards", num_shards, index);
  return simple(std::move(input), int64_t{0}, [num_shards, index](Iterator& in, int64_t& seen, Element* out) {
    while (in.next(out)) {
      if (seen++ % num_shards == index) return true;
    }
    return false;
  });
}

Node take(Node input, int64_t count) {
  return simple(std::move(input), int64_t{0}, [count](Iterator& in, int64_t& taken, Element* out) {
    if (count != kInfinite && taken >= count) return false;
    ++taken;
    return in.next(out);
  });
}

Node skip(Node input, int64_t count) {
  return simple(std::move(input), false, [count](Iterator& in, bool& skipped, Element* out) {
    for (int64_t i = 0; !skipped && i < count; ++i) {
      if (!in.next(out)) return false;
    }
    skipped = true;
    return in.next(out);
  });
}

Node repeat(Node input, int64_t count) {
  TANDEM_CHECK(count >= 0 || count == kInfinite, ErrorCode::kInvalidArgument, "repeat({}): count must be >= 0 or -1",
               count);
  return std::make_shared<RepeatNode>(std::move(input), count);
}

Node shuffle(Node input, int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) {
  TANDEM_CHECK(buffer_size >= 1, ErrorCode::kInvalidArgument, "shuffle(buffer_size={}): must be >= 1", buffer_size);
  return std::make_shared<ShuffleNode>(std::move(input), buffer_size, seed, reshuffle_each_iteration);
}

}  // namespace tandem::data::nodes
