// PlanKey hashing and the process-wide count of plans made.
#include "engine/backend/cpu/plan_cache.h"

#include <algorithm>

namespace tandem::backend::cpu {
namespace {

std::atomic<int64_t> plan_count{0};

}  // namespace

size_t PlanKey::hash() const {
  // FNV-1a over the values: cheap, and the keys are short.
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < size_; ++i) {
    h ^= static_cast<uint64_t>(values_[static_cast<size_t>(i)]);
    h *= 1099511628211ull;
  }
  return static_cast<size_t>(h);
}

bool operator==(const PlanKey& a, const PlanKey& b) {
  return a.size_ == b.size_ && std::equal(a.values_.begin(), a.values_.begin() + a.size_, b.values_.begin());
}

int64_t plans_created() { return plan_count.load(std::memory_order_relaxed); }

void note_plan_created() { plan_count.fetch_add(1, std::memory_order_relaxed); }

}  // namespace tandem::backend::cpu
