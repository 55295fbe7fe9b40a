// The replica plan of a run: which devices the replicas run on, the per-replica and global
// batch (exactly one given, the other derived; a global batch that does not divide is an
// error with the nearest valid choices), and each CPU replica's share of the cores. With several
// processes, each runs the same local replicas and the batch arithmetic is over all of them:
// global replica index = process rank x local replicas + local index.
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
  int threads_per_replica = 0;   // CPU replicas' compute threads; 0: the cores over the local replicas
  int processes = 1;             // processes of the run, each with the same replicas
  int process_rank = 0;
};

struct ReplicaPlan {
  std::vector<Device> devices;  // one per replica of this process
  int processes = 1;
  int process_rank = 0;
  int64_t global_batch_size = 0;
  int64_t per_replica_batch_size = 0;
  int threads_per_replica = 1;
  std::string fallback_warning;  // set when device: auto fell back to the CPU, saying why
  std::string oversubscribed_warning;  // set when threads_per_replica x local replicas exceed the cores

  int replicas() const { return local_replicas() * processes; }  // of every process
  int local_replicas() const { return static_cast<int>(devices.size()); }
  int first_replica() const { return process_rank * local_replicas(); }  // this process's first, global
  // "2 replicas on cpu (1 core each), per-replica batch 64, global batch 128"; with processes:
  // "4 replicas (2 processes x 2) on cpu ..."
  std::string describe() const;
};

// Throws InvalidArgument (batch arithmetic, a device list naming a GPU that does not exist) or
// Unavailable (device: cuda with no usable GPU, carrying why_no_gpu).
ReplicaPlan plan_replicas(const ReplicaPlanRequest& request);

}  // namespace tandem::distribute
