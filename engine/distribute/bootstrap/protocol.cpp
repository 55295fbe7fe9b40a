// Hello messages and the join check.
#include "engine/distribute/bootstrap/protocol.h"

#include <fmt/format.h>

#include <vector>

#include "engine/distribute/process_group.h"

namespace tandem::distribute::bootstrap {

std::string encode(const Hello& h) {
  FrameWriter w;
  w.u32(static_cast<uint32_t>(Op::kHello)).u32(h.rank).u32(h.size).str(h.host).u32(h.pid).u32(h.local_replicas);
  w.str(h.identity.config_hash).str(h.identity.version).str(h.identity.run_id).str(h.token_digest);
  w.str(h.identity.run_dir);  // last: a Hello without it (an older version) still decodes, and is refused
  return w.bytes();
}

std::string who(const Hello& h) {
  const uint32_t first = h.rank * h.local_replicas, last = first + h.local_replicas - 1;
  return first == last ? fmt::format("process {} on {} (pid {}, replica {})", h.rank, h.host, h.pid, first)
                       : fmt::format("process {} on {} (pid {}, replicas {} to {})", h.rank, h.host, h.pid, first, last);
}

Hello decode_hello(FrameReader& in) {
  Hello h;
  h.rank = in.u32();
  h.size = in.u32();
  h.host = in.str();
  h.pid = in.u32();
  h.local_replicas = in.u32();
  h.identity.config_hash = in.str();
  h.identity.version = in.str();
  h.identity.run_id = in.str();
  h.token_digest = in.str();
  if (!in.done()) h.identity.run_dir = in.str();
  return h;
}

std::string refusal(const Hello& first, const Hello& joining) {
  auto side = [](const Hello& h) {
    return fmt::format("process {} on {} (pid {}): {} replica(s), config {}, version {}, run id '{}'", h.rank, h.host,
                       h.pid, h.local_replicas, h.identity.config_hash, h.identity.version, h.identity.run_id);
  };
  std::vector<std::string> why;
  if (joining.token_digest != first.token_digest) {
    why.push_back("the token differs (distribute.token or TANDEM_DIST_TOKEN)");
  }
  if (joining.size != first.size) why.push_back(fmt::format("{} processes against {}", joining.size, first.size));
  if (joining.local_replicas != first.local_replicas) {
    why.push_back("every process must run as many replicas (set devices: N, or cpu:N, the same on every node)");
  }
  if (joining.identity.config_hash != first.identity.config_hash) why.push_back("the config differs");
  if (joining.identity.version != first.identity.version) why.push_back("the Tandem version differs");
  if (!joining.identity.run_id.empty() && !first.identity.run_id.empty() &&
      joining.identity.run_id != first.identity.run_id) {
    why.push_back("the run id differs");
  }
  if (!joining.identity.run_dir.empty() && !first.identity.run_dir.empty() &&
      joining.identity.run_dir != first.identity.run_dir) {
    why.push_back(fmt::format("the run directory differs ('{}' against '{}': every process writes and resumes from "
                              "the same --run-dir)",
                              joining.identity.run_dir, first.identity.run_dir));
  }
  if (joining.rank == 0 || joining.rank >= first.size) {
    why.push_back(fmt::format("rank {} is not a rank a second process may take (1 to {})", joining.rank,
                              first.size - 1));
  }
  if (why.empty()) return {};
  return fmt::format("{}: {} ({}) may not join {}", fmt::join(why, "; "), side(joining),
                     joining.token_digest.empty() ? "no token" : "a token", side(first));
}

std::string token_digest(const std::string& token) {
  if (token.empty()) return {};
  return config_digest("tandem-rendezvous-token:" + token);
}

}  // namespace tandem::distribute::bootstrap
