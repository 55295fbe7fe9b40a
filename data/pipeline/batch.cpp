// batch(batch_size, drop_remainder): stacks consecutive elements into [N, ...] tensors. Behind a
// map that runs on threads and in order, the map's workers copy each result into its row of the
// batch themselves (BatchAssembler), as tf.data's map_and_batch: the copy, which for a batch of
// 32 float images is 19 MiB, runs on all the workers instead of in the one thread that pulls the
// batch. Either way the batches are the same bytes.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <span>

#include <fmt/ranges.h>

#include "data/pipeline/nodes.h"
#include "engine/core/error.h"

namespace tandem::data::nodes {
namespace {

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

std::vector<int64_t> batched_dims(int64_t rows, const Tensor& row) {
  std::vector<int64_t> dims{rows};
  for (int64_t d : row.shape().dims()) dims.push_back(d);
  return dims;
}

// Up to batch_size elements from in, fewer at its end.
std::vector<Element> pull_batch(Iterator& in, int64_t batch_size) {
  std::vector<Element> items;
  items.reserve(static_cast<size_t>(batch_size));
  Element e;
  while (static_cast<int64_t>(items.size()) < batch_size && in.next(&e)) items.push_back(std::move(e));
  return items;
}

// The batches being filled by a map's workers, keyed by batch index. Each row is placed by the
// worker that made it; the first element to arrive gives the batch its shapes, and an element
// that does not match them stays as it is, for the batch to report (report_mismatch).
class BatchAssembler {
 public:
  explicit BatchAssembler(int64_t batch_size) : batch_size_(static_cast<uint64_t>(batch_size)) {}

  void place(uint64_t position, Element& e) {
    Pending* p = pending(position / batch_size_, e);
    if (!matches(*p, e)) return;
    const uint64_t row = position % batch_size_;
    for (size_t k = 0; k < e.tensors.size(); ++k) {
      auto* dst = static_cast<char*>(p->tensors[k].raw_data()) + row * e.tensors[k].nbytes();
      std::memcpy(dst, e.tensors[k].raw_data(), e.tensors[k].nbytes());
    }
    e.tensors.clear();
    std::lock_guard lock(mutex_);
    p->placed[row] = 1;
  }

  // The first `rows` rows of batch `index`, and which of them were placed; forgets the batch.
  std::vector<Tensor> take(uint64_t index, int64_t rows, std::vector<char>* placed) {
    std::lock_guard lock(mutex_);
    auto it = batches_.find(index);
    TANDEM_CHECK(it != batches_.end(), ErrorCode::kInternal, "batch {}: no row was placed", index);
    Pending p = std::move(it->second);
    batches_.erase(it);
    *placed = std::move(p.placed);
    if (static_cast<uint64_t>(rows) == batch_size_) return std::move(p.tensors);
    std::vector<Tensor> out;  // the last, short batch: copy its rows into tensors of its size
    for (const Tensor& t : p.tensors) {
      std::vector<int64_t> dims(t.shape().dims().begin(), t.shape().dims().end());
      dims[0] = rows;
      Tensor shorter = Tensor::empty(Shape(std::span<const int64_t>(dims)), t.dtype());
      std::memcpy(shorter.raw_data(), t.raw_data(), shorter.nbytes());
      out.push_back(std::move(shorter));
    }
    return out;
  }

  void forget(uint64_t index) {
    std::lock_guard lock(mutex_);
    batches_.erase(index);
  }

 private:
  struct Pending {
    std::vector<Tensor> tensors;  // [batch_size, ...] each
    std::vector<char> placed;
  };

  // The batch `index`, made with e's shapes if e is its first element. Nodes of a std::map stay
  // where they are, so the pointer outlives the lock; the batch is taken only after all its rows
  // were placed.
  Pending* pending(uint64_t index, const Element& e) {
    std::lock_guard lock(mutex_);
    auto [it, fresh] = batches_.try_emplace(index);
    if (fresh) {
      for (const Tensor& t : e.tensors) {
        std::vector<int64_t> dims = batched_dims(static_cast<int64_t>(batch_size_), t);
        it->second.tensors.push_back(Tensor::empty(Shape(std::span<const int64_t>(dims)), t.dtype()));
      }
      it->second.placed.assign(batch_size_, 0);
    }
    return &it->second;
  }

  static bool matches(const Pending& p, const Element& e) {
    if (p.tensors.size() != e.tensors.size()) return false;
    for (size_t k = 0; k < e.tensors.size(); ++k) {
      std::span<const int64_t> row = e.tensors[k].shape().dims();
      std::span<const int64_t> rows = p.tensors[k].shape().dims().subspan(1);
      if (e.tensors[k].dtype() != p.tensors[k].dtype()) return false;
      if (!std::equal(row.begin(), row.end(), rows.begin(), rows.end())) return false;
    }
    return true;
  }

  const uint64_t batch_size_;
  std::mutex mutex_;
  std::map<uint64_t, Pending> batches_;
};

// Batches from a map whose workers placed the rows: pulls batch_size results (small now: their
// tensors were moved into the batch) in order and takes the batch they filled.
class AssembledBatchIterator final : public Iterator {
 public:
  AssembledBatchIterator(int64_t batch_size, bool drop_remainder, std::shared_ptr<BatchAssembler> assembler)
      : batch_size_(batch_size), drop_remainder_(drop_remainder), assembler_(std::move(assembler)) {}
  void set_input(std::unique_ptr<Iterator> input) { input_ = std::move(input); }

  bool next(Element* out) override {
    std::vector<Element> items = pull_batch(*input_, batch_size_);
    const uint64_t index = next_index_++;
    if (items.empty() || (drop_remainder_ && static_cast<int64_t>(items.size()) < batch_size_)) {
      if (!items.empty()) assembler_->forget(index);
      return false;
    }
    std::vector<char> placed;
    std::vector<Tensor> tensors = assembler_->take(index, static_cast<int64_t>(items.size()), &placed);
    if (std::find(placed.begin(), placed.begin() + static_cast<ptrdiff_t>(items.size()), 0) !=
        placed.begin() + static_cast<ptrdiff_t>(items.size())) {
      report_mismatch(items, placed, tensors);
    }
    out->tensors = std::move(tensors);
    out->text.clear();
    out->file = items[0].file;
    out->record = items[0].record;
    out->epoch = items[0].epoch;
    return true;
  }

 private:
  // What row i held: its own tensors when it was not placed, else the batch's row shapes.
  static std::string row_layout(const Element& item, bool placed, const std::vector<Tensor>& batch) {
    std::vector<std::string> parts;
    for (const Tensor& t : placed ? batch : item.tensors) {
      std::span<const int64_t> dims = t.shape().dims();
      parts.push_back(fmt::format("{}[{}]", dtype_name(t.dtype()), fmt::join(placed ? dims.subspan(1) : dims, ", ")));
    }
    return fmt::format("({})", fmt::join(parts, ", "));
  }

  // As batching in one thread reports it, whichever row reached the batch first: the first
  // element that differs from the batch's first element.
  [[noreturn]] static void report_mismatch(const std::vector<Element>& items, const std::vector<char>& placed,
                                           const std::vector<Tensor>& batch) {
    const std::string first = row_layout(items[0], placed[0] != 0, batch);
    for (size_t i = 1; i < items.size(); ++i) {
      std::string layout = row_layout(items[i], placed[i] != 0, batch);
      if (layout != first) {
        throw_error(ErrorCode::kInvalidArgument, "batch: {} is {} but {} is {}; resize images to one size before batch",
                    element_name(items[i]), layout, element_name(items[0]), first);
      }
    }
    throw_error(ErrorCode::kInternal, "batch: a row of {} was not placed", element_name(items[0]));
  }

  int64_t batch_size_;
  bool drop_remainder_;
  std::shared_ptr<BatchAssembler> assembler_;
  std::unique_ptr<Iterator> input_;
  uint64_t next_index_ = 0;
};

class BatchNode final : public DatasetNode {
 public:
  BatchNode(Node input, int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}

  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    auto assembler = std::make_shared<BatchAssembler>(batch_size_);
    auto place = [assembler](uint64_t position, Element& e) { assembler->place(position, e); };
    auto placing = placing_map_iterator(input_, ctx, place, static_cast<uint64_t>(batch_size_));
    if (placing != nullptr) {
      auto it = std::make_unique<AssembledBatchIterator>(batch_size_, drop_remainder_, std::move(assembler));
      it->set_input(std::move(placing));
      return it;
    }
    struct It final : Iterator {
      std::unique_ptr<Iterator> input;
      int64_t batch_size;
      bool drop_remainder;
      bool next(Element* out) override {
        std::vector<Element> items = pull_batch(*input, batch_size);
        if (items.empty() || (drop_remainder && static_cast<int64_t>(items.size()) < batch_size)) return false;
        *out = stack_elements(items);
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->input = input_->make_iterator(ctx);
    it->batch_size = batch_size_;
    it->drop_remainder = drop_remainder_;
    return it;
  }

 private:
  Node input_;
  int64_t batch_size_;
  bool drop_remainder_;
};

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
    std::vector<int64_t> dims = batched_dims(n, first);
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

Node batch(Node input, int64_t batch_size, bool drop_remainder) {
  TANDEM_CHECK(batch_size >= 1, ErrorCode::kInvalidArgument, "batch(batch_size={}): must be >= 1", batch_size);
  return std::make_shared<BatchNode>(std::move(input), batch_size, drop_remainder);
}

}  // namespace tandem::data::nodes
