// The cache of oneDNN plans (primitive descriptors, primitives, reorders) by a key of op,
// shapes, parameters, formats and thread budget, so a steady-state step creates none.
// The key is a fixed-size array of integers: building and hashing it never allocates.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>

#include "engine/core/error.h"

namespace tandem::backend::cpu {

class PlanKey {
 public:
  static constexpr int kCapacity = 48;

  explicit PlanKey(int64_t op) { add(op); }
  PlanKey& add(int64_t v) {
    TANDEM_CHECK(size_ < kCapacity, ErrorCode::kInternal, "PlanKey: more than {} values", kCapacity);
    values_[static_cast<size_t>(size_++)] = v;
    return *this;
  }
  PlanKey& add(std::span<const int64_t> vs) {
    add(static_cast<int64_t>(vs.size()));  // keeps ranks apart: [2, 3] + [4] differs from [2] + [3, 4]
    for (int64_t v : vs) add(v);
    return *this;
  }
  PlanKey& add(std::initializer_list<int64_t> vs) { return add(std::span<const int64_t>(vs.begin(), vs.size())); }

  size_t hash() const;
  friend bool operator==(const PlanKey& a, const PlanKey& b);

 private:
  std::array<int64_t, kCapacity> values_{};
  int size_ = 0;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const { return key.hash(); }
};

// Counts plans made since the process started: a test runs the same op twice and expects
// the count not to move the second time.
int64_t plans_created();
void note_plan_created();

// One cache per plan type. Plans are never evicted: a training run sees a fixed set of shapes.
template <typename Plan>
class PlanCache {
 public:
  template <typename Make>
  const Plan& get(const PlanKey& key, Make&& make) {
    std::lock_guard lock(mutex_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    auto plan = std::make_unique<Plan>(make());
    note_plan_created();
    return *plans_.emplace(key, std::move(plan)).first->second;
  }

 private:
  std::mutex mutex_;  // held while a plan is made, so two threads never make the same one
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans_;
};

}  // namespace tandem::backend::cpu
