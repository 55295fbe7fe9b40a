// Tensor shapes: up to kMaxRank dimensions stored inline, so making a shape never allocates.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace tandem {

class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const;
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  std::string str() const;  // "[2, 3, 4]"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace tandem
