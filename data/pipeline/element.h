// Element: the unit that flows through a Dataset. Before decoding it is a record payload (or
// a file name); after, a list of tensors (image, label, ...). It remembers where it came from
// so errors, augmentation seeds and resume positions can name the file and record.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace tandem::data {

struct Element {
  std::string text;             // a file name (list_files) or a record's payload
  std::vector<Tensor> tensors;  // decoded components: image, label, ...
  std::string file;             // the file it was read from; "" for in-memory sources
  int64_t record = 0;           // index of the record in that file (the value, for range)
  int64_t epoch = 0;            // the epoch of the iterator that produced it

  // Bytes this element holds, so queues can be bounded in memory and not only in count.
  size_t bytes() const;
};

// A CPU i64 scalar (rank 0) holding one value, for labels; a batch of them is [N].
Tensor scalar_i64(int64_t value);

}  // namespace tandem::data
