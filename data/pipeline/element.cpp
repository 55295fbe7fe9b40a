// Element sizes for byte-bounded queues, and small tensor helpers.
#include "data/pipeline/element.h"

namespace tandem::data {

size_t Element::bytes() const {
  // The fixed part counts too, so that a queue of empty elements is still bounded.
  size_t total = sizeof(Element) + text.size() + file.size();
  for (const Tensor& t : tensors) {
    total += t.defined() ? t.nbytes() : 0;
  }
  return total;
}

Tensor scalar_i64(int64_t value) {
  Tensor t = Tensor::empty(Shape{}, DType::kI64);
  *t.data<int64_t>() = value;
  return t;
}

}  // namespace tandem::data
