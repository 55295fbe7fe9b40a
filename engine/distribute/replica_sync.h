// Keeping replicas identical: replica 0's parameters and buffers broadcast at start, and a
// checksum of every tensor compared across replicas (every N steps and at each checkpoint).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/distribute/communicator.h"
#include "engine/nn/module.h"

namespace tandem::distribute {

// Copies root's parameters and buffers (in registration order) into every other replica's
// module, which must have the same architecture. Launches all, then waits.
void broadcast_parameters(Communicator& comm, nn::Module& module, int root = 0);

// A 64-bit hash of a tensor's bytes (copied to the host first when it lives on a device).
uint64_t tensor_checksum(const Tensor& x);
// The checksum of every parameter then (include_buffers) every buffer, with its dotted name.
std::vector<std::pair<std::string, uint64_t>> parameter_checksums(nn::Module& module, bool include_buffers = true);

// All-gathers every replica's checksums and throws FailedPrecondition naming the first tensor
// (parameters first, in registration order) whose bytes differ, and which replicas disagree.
// include_buffers: false while BatchNorm keeps per-replica running statistics, which differ by design.
void verify_parameters(Communicator& comm, nn::Module& module, bool include_buffers = true);

}  // namespace tandem::distribute
