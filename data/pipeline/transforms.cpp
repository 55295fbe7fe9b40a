// The sequential transformations: shard, take, skip, repeat, shuffle and batch. They run in
// the thread of whoever pulls from them (a prefetch or map thread in a real pipeline).
#include <cstring>

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

std::string element_name(const Element& e) {
  return e.file.empty() ? fmt::format("element {}", e.record) : fmt::format("{} record {}", e.file, e.record);
}

void check_stackable(const std::vector<Element>& elements, size_t i) {
  const Element& first = elements[0];
  const Element& e = elements[i];
  TANDEM_CHECK(e.tensors.size() == first.tensors.size(), ErrorCode::kInvalidArgument,
               "batch: {} has {} tensors but {} has {}", element_name(e), e.tensors.size(), element_name(first),
               first.tensors.size());
  for (size_t k = 0; k < e.tensors.size(); ++k) {
    const Tensor& a = first.tensors[k];
    const Tensor& b = e.tensors[k];
    TANDEM_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), ErrorCode::kInvalidArgument,
                 "batch: component {} of {} is {} but of {} is {}; resize images to one size before batch", k,
                 element_name(e), b.describe(), element_name(first), a.describe());
  }
}

}  // namespace

Element stack_elements(std::vector<Element>& elements) {
  TANDEM_CHECK(!elements.empty(), ErrorCode::kInternal, "stack_elements of nothing");
  Element out;
  out.file = elements[0].file;
  out.record = elements[0].record;
  out.epoch = elements[0].epoch;
  for (size_t i = 1; i < elements.size(); ++i) check_stackable(elements, i);
  const int64_t n = static_cast<int64_t>(elements.size());
  for (size_t k = 0; k < elements[0].tensors.size(); ++k) {
    const Tensor& first = elements[0].tensors[k];
    std::vector<int64_t> dims{n};
    for (int64_t d : first.shape().dims()) dims.push_back(d);
    Tensor stacked = Tensor::empty(Shape(std::span<const int64_t>(dims)), first.dtype());
    auto* dst = static_cast<char*>(stacked.raw_data());
    for (const Element& e : elements) {
      std::memcpy(dst, e.tensors[k].raw_data(), first.nbytes());
      dst += first.nbytes();
    }
    out.tensors.push_back(std::move(stacked));
  }
  return out;
}

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

Node batch(Node input, int64_t batch_size, bool drop_remainder) {
  TANDEM_CHECK(batch_size >= 1, ErrorCode::kInvalidArgument, "batch(batch_size={}): must be >= 1", batch_size);
  return simple(std::move(input), 0, [batch_size, drop_remainder](Iterator& in, int&, Element* out) {
    std::vector<Element> items;
    items.reserve(static_cast<size_t>(batch_size));
    Element e;
    while (static_cast<int64_t>(items.size()) < batch_size && in.next(&e)) items.push_back(std::move(e));
    if (items.empty() || (drop_remainder && static_cast<int64_t>(items.size()) < batch_size)) return false;
    *out = stack_elements(items);
    return true;
  });
}

}  // namespace tandem::data::nodes
