// The rendezvous protocol: what a process says when it joins (who it is, what it runs, the
// token's digest) and the requests of the key-value store the collectives bootstrap from.
#pragma once

#include <cstdint>
#include <string>

#include "engine/distribute/bootstrap/socket.h"

namespace tandem::distribute::bootstrap {

enum class Op : uint32_t {
  kHello = 1,     // Hello -> kWelcome (every process's host and who(), once all have joined) or kRefused (why)
  kSet = 2,       // key, value -> kAck
  kGet = 3,       // key -> kValue, once some process has set it
  kDeparted = 4,  // -> kValue: the processes whose connection closed without kBye ("" if none)
  kBye = 5,       // this process is done; its connection closing is not a failure
  kFailed = 6,    // reason: this process failed and is leaving (named by kDeparted's answer)
  kHas = 7,       // key -> kValue "1" when some process has set it, else "0" (never waits)
  kWelcome = 10,
  kRefused = 11,
  kAck = 12,
  kValue = 13,
};

// What must be equal for two processes to train together.
struct ProcessIdentity {
  std::string config_hash{};  // of the resolved config, process-specific keys left out
  std::string version{};      // tandem::version()
  std::string run_id{};       // the launcher's job id, or distribute.run_id; empty matches any
  std::string run_dir{};      // --run-dir as given: checkpoints are written and read there; empty matches any
};

struct Hello {
  uint32_t rank = 0;
  uint32_t size = 0;
  std::string host{};
  uint32_t pid = 0;
  uint32_t local_replicas = 1;  // every process must run as many (global rank = process x this + local)
  ProcessIdentity identity{};
  std::string token_digest{};  // never the token itself
};

std::string encode(const Hello& hello);
// "process 1 on host-b (pid 42, replicas 2 to 3)": how errors name a process.
std::string who(const Hello& hello);
Hello decode_hello(FrameReader& in);

// Why `joining` may not train with process 0 (`first`), naming both sides; empty when it may.
std::string refusal(const Hello& first, const Hello& joining);

// A digest of the token, so the token does not cross the network in the clear: a stray process
// is kept out; this is not a defence against someone who can read the traffic.
std::string token_digest(const std::string& token);

}  // namespace tandem::distribute::bootstrap
