#include "engine/core/shape.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/core/error.h"

namespace tandem {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  TANDEM_CHECK(dims.size() <= static_cast<size_t>(kMaxRank), ErrorCode::kInvalidArgument,
               "shape of rank {} exceeds the maximum rank {}", dims.size(), kMaxRank);
  for (int64_t d : dims) {
    TANDEM_CHECK(d >= 0, ErrorCode::kInvalidArgument, "negative dimension {} in shape [{}]", d,
                 fmt::join(dims, ", "));
  }
  std::copy(dims.begin(), dims.end(), dims_.begin());
  rank_ = static_cast<int>(dims.size());
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    // Checked: a product past int64 (model sizes near 2^62) once wrapped to a small count, and the
    // tensor's writes ran past a small allocation.
    if (__builtin_mul_overflow(n, dims_[static_cast<size_t>(i)], &n)) {
      throw_error(ErrorCode::kInvalidArgument, "shape {} has more elements than a 64-bit count holds", str());
    }
  }
  return n;
}

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(dims(), ", ")); }

bool operator==(const Shape& a, const Shape& b) {
  return a.rank_ == b.rank_ && std::equal(a.dims_.begin(), a.dims_.begin() + a.rank_, b.dims_.begin());
}

}  // namespace tandem
