// prefetch(buffer_size): one thread pulls from the input into a queue bounded in elements and
// bytes, so the consumer finds the next element ready. Errors travel through the queue.
#include <spdlog/spdlog.h>

#include <thread>

#include "data/pipeline/bounded_queue.h"
#include "data/pipeline/carried_error.h"
#include "data/pipeline/nodes.h"
#include "data/pipeline/stop_scope.h"
#include "engine/core/error.h"

namespace tandem::data::nodes {
namespace {

constexpr int64_t kAutotunedPrefetch = 4;  // bounded by the byte budget as well

struct Slot {
  Element element;
  CarriedError error;
};

class PrefetchIterator final : public Iterator {
 public:
  PrefetchIterator(const Node& input, size_t buffer_size, const IteratorContext& ctx)
      : scope_(ctx.stop), queue_(buffer_size, ctx.budget.queue_bytes) {
    IteratorContext child = ctx;
    child.stop = scope_.token();
    input_ = input->make_iterator(child);
    thread_ = std::thread([this] { produce(); });
  }

  ~PrefetchIterator() override {
    scope_.request_stop();
    thread_.join();
  }

  bool next(Element* out) override {
    if (failed_) return false;
    Slot slot;
    if (!queue_.pop(&slot, scope_.token())) {
      if (scope_.token().stop_requested()) throw_stopped();
      return false;
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
  std::thread thread_;
};

class PrefetchNode final : public DatasetNode {
 public:
  PrefetchNode(Node input, int64_t buffer_size) : input_(std::move(input)), buffer_size_(buffer_size) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    int64_t size = buffer_size_;
    if (size == kAutotune) {
      size = kAutotunedPrefetch;
      spdlog::debug("autotune: prefetch buffer_size = {} (queue bound {} MiB)", size, ctx.budget.queue_bytes >> 20);
    }
    if (size == 0) return input_->make_iterator(ctx);
    return std::make_unique<PrefetchIterator>(input_, static_cast<size_t>(size), ctx);
  }

 private:
  Node input_;
  int64_t buffer_size_;
};

}  // namespace

Node prefetch(Node input, int64_t buffer_size) {
  TANDEM_CHECK(buffer_size >= 0 || buffer_size == kAutotune, ErrorCode::kInvalidArgument,
               "prefetch(buffer_size={}): must be >= 0 or autotune", buffer_size);
  return std::make_shared<PrefetchNode>(std::move(input), buffer_size);
}

}  // namespace tandem::data::nodes
