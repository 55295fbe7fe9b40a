// ProcessLink in a build without Gloo: a multi-process run says what to install.
#include "engine/distribute/process_link.h"

#include "engine/core/error.h"

namespace tandem::distribute {

struct ProcessLink::Impl {};

ProcessLink::ProcessLink(const ProcessLinkOptions& o) {
  throw Error(ErrorCode::kUnavailable,
              fmt::format("{} processes need Gloo, and this build has none: apt-get install libgloo-dev, then "
                          "reconfigure and rebuild Tandem",
                          o.spec.size));
}
ProcessLink::~ProcessLink() = default;
bool ProcessLink::available() { return false; }
int ProcessLink::rank() const { return 0; }
int ProcessLink::size() const { return 1; }
int ProcessLink::local_replicas() const { return 1; }
const std::vector<std::string>& ProcessLink::hosts() const {
  static const std::vector<std::string> none;
  return none;
}
bootstrap::Client& ProcessLink::rendezvous() { throw Error(ErrorCode::kUnavailable, "no Gloo in this build"); }
void ProcessLink::all_reduce_sum(int, float*, int64_t) {}
void ProcessLink::all_reduce_sum_bf16(int, uint16_t*, int64_t) {}
void ProcessLink::all_gather(int, const void*, void*, size_t) {}
void ProcessLink::broadcast(int, void*, size_t, int) {}
void ProcessLink::barrier(int) {}
std::string ProcessLink::diagnose() { return {}; }
void ProcessLink::goodbye() noexcept {}
void ProcessLink::report_failure(const std::string&) noexcept {}

}  // namespace tandem::distribute
