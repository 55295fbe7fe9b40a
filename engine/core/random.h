// Philox-4x32-10, a counter-based generator: the stream for (seed, epoch, replica) is a pure
// function of those numbers, so runs repeat bitwise and replicas draw independent streams.
#pragma once

#include <array>
#include <cstdint>

namespace tandem {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t subsequence = 0);

  // The generator for (seed, epoch, replica) that DESIGN.md's determinism rule asks for.
  static Generator for_replica(uint64_t seed, uint64_t epoch, int replica);

  uint32_t next_u32();
  uint64_t next_u64();
  float uniform();                   // in [0, 1)
  float uniform(float lo, float hi);  // in [lo, hi)
  float normal();                    // standard normal, Box-Muller
  uint64_t below(uint64_t n);        // uniform integer in [0, n), unbiased

  // The state to save in a checkpoint, and to restore from it.
  struct State {
    uint64_t seed;
    uint64_t subsequence;
    uint64_t offset;
  };
  State state() const;
  void set_state(const State& state);

 private:
  void refill();

  uint64_t seed_;
  uint64_t subsequence_;
  uint64_t offset_ = 0;  // blocks of four numbers drawn so far
  std::array<uint32_t, 4> block_{};
  int used_ = 4;  // numbers of block_ already handed out
};

}  // namespace tandem
