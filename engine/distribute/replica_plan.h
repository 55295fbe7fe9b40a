// The replica plan of a run: which devices the replicas run on, the per-replica and global
// batch (exactly one given, the other derived; a global batch that does not divide is an
// error with the nearest valid choices), and each CPU replica's share of the cores.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace tandem::distribute {

struct ReplicaPlanRequest {
  std::string device = "auto";   // auto | cpu | cuda
  std::string devices = "all";   // all | N | "[0,1]" (a list of GPU indices) | cpu:N
  int visible_gpus = 0;          // what the CUDA plugin sees (0 when it is not loaded)
  std::string why_no_gpu{};      // doctor's diagnosis when visible_gpus is 0
  int64_t global_batch_size = 0;       // exactly one of these two is positive
  int64_t per_replica_batch_size = 0;
  int cores = 0;                 // CPU cores to share between CPU replicas (0: all available)
};

struct ReplicaPlan {
  std::vector<Device> devices;  // one per replica
  int64_t global_batch_size = 0;
  int64_t per_replica_batch_size = 0;
  int threads_per_replica = 1;
  std::string fallback_warning;  // set when device: auto fell back to the CPU, saying why

  int replicas() const { return static_cast<int>(devices.size()); }
  // "2 replicas on cpu (1 core each), per-replica batch 64, global batch 128"
  std::string describe() const;
};

// Throws InvalidArgument (batch arithmetic, a device list naming a GPU that does not exist) or
// Unavailable (device: cuda with no usable GPU, carrying why_no_gpu).
ReplicaPlan plan_replicas(const ReplicaPlanRequest& request);

}  // namespace tandem::distribute
