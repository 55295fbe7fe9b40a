// Parameter broadcast and cross-replica checksums. The checksum hashes raw bytes, so it proves
// bitwise equality (what DESIGN.md promises), not closeness.
#include "engine/distribute/replica_sync.h"

#include <fmt/format.h>

#include <cstring>

namespace tandem::distribute {
namespace {

// The tensors of a module that replicas start from (parameters, then buffers), or that they
// must still agree on later (parameters; buffers too when every buffer is synchronised).
std::vector<std::pair<std::string, Tensor>> replica_state(nn::Module& module, bool with_buffers = true) {
  std::vector<std::pair<std::string, Tensor>> state;
  for (auto& [name, v] : module.named_parameters()) state.emplace_back(name, v.value());
  if (!with_buffers) return state;
  for (auto& [name, t] : module.named_buffers()) state.emplace_back(name, *t);
  return state;
}

uint64_t mix(uint64_t h) {  // splitmix64's finaliser: every input bit reaches every output bit
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace

void broadcast_parameters(Communicator& comm, nn::Module& module, int root) {
  auto state = replica_state(module);
  std::vector<CollectiveHandle> handles;
  handles.reserve(state.size());
  for (auto& [name, t] : state) {
    // Host counters (num_batches_tracked, kept on the host by Module::to) advance identically on
    // every replica; the device communicator cannot take them.
    if (t.device().is_cpu() && !comm.device().is_cpu()) continue;
    TANDEM_CHECK(t.device() == comm.device(), ErrorCode::kInvalidArgument,
                 "broadcast_parameters: {} is {}, but the communicator works on {}", name, t.describe(),
                 comm.device().str());
    handles.push_back(comm.broadcast_async(t, root));
  }
  for (auto& h : handles) h.wait();
  // Written in place: a bf16 shadow rounded from the values before is stale now (Tensor::bf16_shadow).
  for (auto& [name, t] : state) t.bump_version();
}

uint64_t tensor_checksum(const Tensor& x) {
  if (!x.defined()) return 0;
  Tensor host = x.device().is_cpu() ? x : x.to(Device::cpu());
  const auto* bytes = static_cast<const unsigned char*>(host.raw_data());
  const size_t n = host.nbytes();
  uint64_t h = mix(n ^ 0x9e3779b97f4a7c15ULL);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    h = mix(h ^ word) + i;  // + i: equal words at different places do not cancel
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes + i, n - i);
  return mix(h ^ tail ^ (static_cast<uint64_t>(n - i) << 56));
}

std::vector<std::pair<std::string, uint64_t>> parameter_checksums(nn::Module& module, bool include_buffers) {
  std::vector<std::pair<std::string, uint64_t>> sums;
  for (auto& [name, t] : replica_state(module, include_buffers)) sums.emplace_back(name, tensor_checksum(t));
  return sums;
}

void verify_parameters(Communicator& comm, nn::Module& module, bool include_buffers) {
  auto sums = parameter_checksums(module, include_buffers);
  const auto n = static_cast<int64_t>(sums.size());
  const int ranks = comm.world_size();
  Tensor mine = Tensor::empty({n}, DType::kI64);
  for (int64_t i = 0; i < n; ++i) mine.data<int64_t>()[i] = static_cast<int64_t>(sums[static_cast<size_t>(i)].second);
  Tensor gathered = Tensor::empty({ranks, n}, DType::kI64, comm.device());
  comm.all_gather(mine.to(comm.device()), gathered);
  Tensor all = gathered.to(Device::cpu());
  const int64_t* h = all.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::string differ;
    for (int r = 1; r < ranks; ++r) {
      if (h[r * n + i] != h[i]) differ += fmt::format(", replica {} has {:016x}", r, static_cast<uint64_t>(h[r * n + i]));
    }
    if (!differ.empty()) {
      throw_error(ErrorCode::kFailedPrecondition,
                  "replicas differ at step {}: {} is not bitwise equal across replicas (replica 0 has {:016x}{}); "
                  "replicas must see the same reduced gradients and run the same optimizer",
                  comm.step(), sums[static_cast<size_t>(i)].first, static_cast<uint64_t>(h[i]), differ);
    }
  }
}

}  // namespace tandem::distribute
