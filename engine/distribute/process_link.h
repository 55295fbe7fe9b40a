// The collectives between the processes of a multi-process run, on Gloo over TCP (the library
// PyTorch uses for CPU collectives). One link per process; one Gloo context (a channel) per local replica,
// so each local replica's communicator thread can run its part of a collective beside the others.
// Failures name the process that is gone (from the rendezvous), or say that one is stalled.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/distribute/bootstrap/protocol.h"
#include "engine/distribute/process_group.h"

namespace tandem::distribute {

namespace bootstrap {
class Client;
}

struct ProcessLinkOptions {
  ProcessGroupSpec spec;
  bootstrap::ProcessIdentity identity;
  // Replicas in this process (every process runs as many; the rendezvous refuses one that does
  // not): process p holds global replicas p*L .. p*L+L-1, and the link has L Gloo channels.
  int local_replicas = 1;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

class ProcessLink {
 public:
  // Joins the rendezvous and connects every channel. Throws Unavailable in a build without Gloo.
  explicit ProcessLink(const ProcessLinkOptions& options);
  ~ProcessLink();
  ProcessLink(const ProcessLink&) = delete;
  ProcessLink& operator=(const ProcessLink&) = delete;

  static bool available();  // whether this build has Gloo

  int rank() const;
  int size() const;
  int local_replicas() const;
  const std::vector<std::string>& hosts() const;  // by process rank
  bootstrap::Client& rendezvous();

  // Each call blocks its thread until every process made the same call on the same channel.
  // data[i] = the sum over processes (in place).
  void all_reduce_sum(int channel, float* data, int64_t count);
  // The same of bf16 values (uint16_t bits): each hop adds in f32 and rounds the sum to bf16.
  void all_reduce_sum_bf16(int channel, uint16_t* data, int64_t count);
  // out = every process's `bytes` bytes of in, in process order.
  void all_gather(int channel, const void* in, void* out, size_t bytes);
  void broadcast(int channel, void* data, size_t bytes, int root);
  void barrier(int channel);

  // After a failed collective: "gone: process 1 on host-b (pid 42, replicas 2 to 3) left without
  // a word", or, when none left, which processes did not reach the collective (stalled).
  std::string diagnose();
  // This process is done: the others will not read its leaving as a failure. A link destroyed
  // without it (or report_failure) counts as a process that left without a word.
  void goodbye() noexcept;
  // This process failed: the others' errors quote the reason.
  void report_failure(const std::string& reason) noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::distribute
