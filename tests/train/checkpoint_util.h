// Shared pieces of the checkpoint tests: a temporary directory, byte-level file access, a small
// model with every kind of state (conv, BatchNorm buffers, linear) and one real training step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/train/checkpoint/safetensors.h"
#include "tests/support/temp_dir.h"

namespace tandem::train::testing {

using ::tandem::testing::TempDir;

std::vector<uint8_t> read_bytes(const std::filesystem::path& path);
void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);
void append(std::vector<uint8_t>& out, std::string_view text);
void append_u64(std::vector<uint8_t>& out, uint64_t v);

// Conv2d(1->4) + BatchNorm2d + ReLU + Flatten + Linear(4*6*6 -> 3), seeded.
std::shared_ptr<nn::Sequential> small_model(uint64_t seed);
// A wide MLP of about `megabytes` of f32 parameters, for saves that take a while.
std::shared_ptr<nn::Sequential> large_model(int megabytes);

struct Batch {
  Tensor x, labels;
};
Batch random_batch(int n, uint64_t seed);  // x (n, 1, 6, 6), labels in [0, 3)

// Forward, cross-entropy, backward and one optimizer step.
void train_step(ExecutionContext& ctx, nn::Module& model, optim::Optimizer& optimizer, const Batch& batch);

// True when both maps hold the same names, shapes, dtypes and bytes (logical order).
bool bitwise_equal(const TensorMap& a, const TensorMap& b, std::string* difference = nullptr);

}  // namespace tandem::train::testing
