// The process group's rank, size and rendezvous, from the launcher's environment or the config.
#include "engine/distribute/process_group.h"

#include <cstdlib>
#include <vector>

#include "engine/core/error.h"

namespace tandem::distribute {
namespace {

// A launcher's names for the rank and the size, and where it puts a run id.
struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  std::vector<const char*> run_id;
};

const std::vector<Launcher>& launchers() {
  static const std::vector<Launcher> all = {
      {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", {"OMPI_MCA_ess_base_jobid"}},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", {"SLURM_JOB_ID"}},
      {"environment (RANK, WORLD_SIZE)", "RANK", "WORLD_SIZE", {"TORCHELASTIC_RUN_ID"}},
  };
  return all;
}

int parse_count(const std::string& text, const std::string& where, int min) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  TANDEM_CHECK(!text.empty() && end != nullptr && *end == '\0' && v >= min && v <= 1'000'000,
               ErrorCode::kInvalidArgument, "{} is '{}': expected a whole number >= {}", where, text, min);
  return static_cast<int>(v);
}

std::string first_of(const EnvLookup& env, const std::vector<const char*>& names) {
  for (const char* n : names) {
    if (auto v = env(n); v && !v->empty()) return *v;
  }
  return {};
}

// The rank and size: the first launcher whose two variables are both set, else the config.
bool rank_from_launcher(const EnvLookup& env, ProcessGroupSpec& spec) {
  for (const Launcher& l : launchers()) {
    auto rank = env(l.rank), size = env(l.size);
    if (!rank || !size) continue;
    spec.size = parse_count(*size, fmt::format("{} ({})", l.size, l.name), 1);
    spec.rank = parse_count(*rank, fmt::format("{} ({})", l.rank, l.name), 0);
    spec.source = l.name;
    spec.run_id = first_of(env, l.run_id);
    return true;
  }
  return false;
}

void rank_from_config(const ProcessGroupRequest& request, ProcessGroupSpec& spec) {
  if (request.processes <= 1) {
    TANDEM_CHECK(request.process_rank <= 0, ErrorCode::kInvalidArgument,
                 "distribute.process_rank is {} but distribute.processes is {}: give distribute.processes too",
                 request.process_rank, request.processes);
    return;
  }
  TANDEM_CHECK(request.process_rank >= 0, ErrorCode::kInvalidArgument,
               "distribute.processes is {}: give each process its distribute.process_rank (0 to {})",
               request.processes, request.processes - 1);
  spec.size = request.processes;
  spec.rank = request.process_rank;
  spec.source = "config";
}

std::string rendezvous_address(const ProcessGroupRequest& request, const EnvLookup& env) {
  if (auto v = env("MASTER_ADDR"); v && !v->empty()) return *v;
  if (!request.address.empty()) return request.address;
  std::string nodes = first_of(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  return nodes.empty() ? std::string() : first_slurm_host(nodes);
}

}  // namespace

std::string ProcessGroupSpec::describe() const {
  if (!multi_process()) return "a single process";
  return fmt::format("process {} of {} (from {}), rendezvous at {}:{}", rank, size, source, address, port);
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

ProcessGroupSpec resolve_process_group(const ProcessGroupRequest& request, const EnvLookup& env) {
  ProcessGroupSpec spec;
  spec.source = "single process";
  if (!rank_from_launcher(env, spec)) rank_from_config(request, spec);
  TANDEM_CHECK(spec.rank < spec.size, ErrorCode::kInvalidArgument,
               "process rank {} (from {}) is not below the process count {}", spec.rank, spec.source, spec.size);
  if (spec.run_id.empty()) spec.run_id = request.run_id;
  if (auto v = env("TANDEM_DIST_TOKEN"); v && !v->empty()) {
    spec.token = *v;
  } else {
    spec.token = request.token;
  }
  if (!spec.multi_process()) return spec;
  spec.address = rendezvous_address(request, env);
  TANDEM_CHECK(!spec.address.empty(), ErrorCode::kInvalidArgument,
               "{} processes (from {}) need a rendezvous address: set MASTER_ADDR (mpirun -x MASTER_ADDR=<host of "
               "rank 0>) or distribute.address",
               spec.size, spec.source);
  if (auto v = env("MASTER_PORT"); v && !v->empty()) {
    spec.port = parse_count(*v, "MASTER_PORT", 1);
  } else {
    spec.port = request.port > 0 ? request.port : kDefaultRendezvousPort;
  }
  TANDEM_CHECK(spec.port <= 65535, ErrorCode::kInvalidArgument, "the rendezvous port {} is not a TCP port", spec.port);
  return spec;
}

std::string config_digest(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets; a bracket range keeps its first number.
  std::string host;
  size_t i = 0;
  for (; i < nodelist.size() && nodelist[i] != ',' && nodelist[i] != '['; ++i) host += nodelist[i];
  if (i < nodelist.size() && nodelist[i] == '[') {
    for (++i; i < nodelist.size() && nodelist[i] != '-' && nodelist[i] != ',' && nodelist[i] != ']'; ++i) {
      host += nodelist[i];
    }
  }
  return host;
}

}  // namespace tandem::distribute
