#include "engine/core/random.h"

#include <cmath>
#include <numbers>

namespace tandem {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
constexpr uint32_t kKey0 = 0x9E3779B9, kKey1 = 0xBB67AE85;

std::array<uint32_t, 4> philox(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kKey0;
    key[1] += kKey1;
  }
  return ctr;
}

}  // namespace

Generator::Generator(uint64_t seed, uint64_t subsequence) : seed_(seed), subsequence_(subsequence) {}

Generator Generator::for_replica(uint64_t seed, uint64_t epoch, int replica) {
  // Epoch and replica share the 64-bit subsequence: 40 bits of epoch, 24 of replica.
  return Generator(seed, (epoch << 24) | (static_cast<uint64_t>(replica) & 0xffffff));
}

void Generator::refill() {
  std::array<uint32_t, 4> ctr = {static_cast<uint32_t>(offset_), static_cast<uint32_t>(offset_ >> 32),
                                 static_cast<uint32_t>(subsequence_), static_cast<uint32_t>(subsequence_ >> 32)};
  block_ = philox(ctr, {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  ++offset_;
  used_ = 0;
}

uint32_t Generator::next_u32() {
  if (used_ == 4) refill();
  return block_[static_cast<size_t>(used_++)];
}

uint64_t Generator::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Generator::uniform() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }

float Generator::uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }

float Generator::normal() {
  float u1 = 1.0f - uniform();  // in (0, 1], so the log is finite
  float u2 = uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(2.0f * std::numbers::pi_v<float> * u2);
}

uint64_t Generator::below(uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // reject the tail that would bias the result
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % n;
}

Generator::State Generator::state() const {
  // Saved as the position of the next number, so a restore continues mid-block exactly.
  uint64_t drawn = used_ == 4 ? offset_ * 4 : (offset_ - 1) * 4 + static_cast<uint64_t>(used_);
  return {seed_, subsequence_, drawn};
}

void Generator::set_state(const State& state) {
  seed_ = state.seed;
  subsequence_ = state.subsequence;
  offset_ = state.offset / 4;
  used_ = 4;
  uint64_t skip = state.offset % 4;
  if (skip != 0) {
    refill();
    used_ = static_cast<int>(skip);
  }
}

}  // namespace tandem
