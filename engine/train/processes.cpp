#include "engine/train/processes.h"

#include <spdlog/spdlog.h>

#include "engine/train/checkpoint/meta.h"

namespace tandem::train {

std::shared_ptr<distribute::ProcessLink> join_processes(const distribute::ProcessGroupSpec& spec,
                                                        const std::string& config_hash, int local_replicas,
                                                        std::chrono::milliseconds timeout, const std::string& run_dir) {
  distribute::ProcessLinkOptions o;
  o.spec = spec;
  o.identity = {.config_hash = config_hash, .version = tandem_version(), .run_id = spec.run_id, .run_dir = run_dir};
  o.local_replicas = local_replicas;
  o.timeout = timeout;
  spdlog::info("{}: joining the rendezvous (config {}{})", spec.describe(), config_hash,
               spec.token.empty() ? "" : ", with a token");
  auto link = std::make_shared<distribute::ProcessLink>(o);
  if (spec.rank == 0) {
    spdlog::info("all {} processes joined, from {}", link->size(), fmt::join(link->hosts(), ", "));
  }
  return link;
}

}  // namespace tandem::train
