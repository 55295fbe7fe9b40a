// Who this process is in a multi-process run (one process per node, R replica threads in each):
// its rank, the process count, and where the rendezvous listens. They come, in this order, from
// OpenMPI's variables (mpirun), Slurm's (srun), torchrun-style RANK / WORLD_SIZE / MASTER_ADDR /
// MASTER_PORT, or the distribute.* keys of the config. A single process needs none of them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::distribute {

// What the config says (distribute.processes, process_rank, address, port, token, run_id); zero
// or empty where it is silent.
struct ProcessGroupRequest {
  int processes = 0;
  int process_rank = -1;
  std::string address{};
  int port = 0;
  std::string token{};
  std::string run_id{};
};

struct ProcessGroupSpec {
  int rank = 0;
  int size = 1;
  std::string address{};  // the rendezvous: process 0 listens there, the others connect
  int port = 0;
  std::string token{};    // empty: no token asked
  std::string run_id{};   // empty: any
  std::string source{};   // "OpenMPI", "Slurm", "environment (RANK, WORLD_SIZE)", "config", "single process"

  bool multi_process() const { return size > 1; }
  // "process 1 of 2 (from Slurm), rendezvous at 10.0.0.5:29500"
  std::string describe() const;
};

// The environment as a function, so tests can give their own.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_environment();

inline constexpr int kDefaultRendezvousPort = 29500;

// Throws InvalidArgument naming the variable or key when a rank is out of range, a count is not a
// number, or a multi-process run has no rendezvous address.
ProcessGroupSpec resolve_process_group(const ProcessGroupRequest& request, const EnvLookup& env);

// A 64-bit FNV-1a digest of a text, as 16 hex digits: what processes compare of their configs.
std::string config_digest(std::string_view text);

// The first host of a Slurm node list: "node[03-05,7],gpu1" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace tandem::distribute
