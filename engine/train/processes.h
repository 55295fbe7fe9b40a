// Joining the processes of a multi-process run: the rendezvous (which refuses a process of
// another config, version, run id, run directory or token) and the Gloo links, with the log lines that say who
// joined from where.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "engine/distribute/process_group.h"
#include "engine/distribute/process_link.h"

namespace tandem::train {

std::shared_ptr<distribute::ProcessLink> join_processes(const distribute::ProcessGroupSpec& spec,
                                                        const std::string& config_hash, int local_replicas,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& run_dir = "");

}  // namespace tandem::train
