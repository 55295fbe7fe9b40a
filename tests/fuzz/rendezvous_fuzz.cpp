// The rendezvous server's reading of a request on arbitrary bytes (anyone on the network can
// connect to it): the frame length, then each request as the server decodes it, including a
// join's Hello checked against process 0's. A tandem::Error (DataLoss for a short or odd message),
// never another exception or a crash.
#include <string>
#include <string_view>

#include "engine/core/error.h"
#include "engine/distribute/bootstrap/protocol.h"

namespace {

using namespace tandem::distribute::bootstrap;

void read_request(std::string_view payload) {
  static const Hello first{.rank = 0, .size = 4, .host = "node-a", .pid = 1, .local_replicas = 2,
                           .identity = {"cfg", "0.1.0", "run"}, .token_digest = token_digest("t")};
  FrameReader in(payload);
  switch (static_cast<Op>(in.u32())) {
    case Op::kHello: {
      Hello h = decode_hello(in);
      (void)refusal(first, h);
      (void)who(h);
      break;
    }
    case Op::kSet: in.str(); in.str(); break;
    case Op::kGet:
    case Op::kHas:
    case Op::kFailed: in.str(); break;
    default: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    read_request(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const tandem::Error&) {
  }
  return 0;
}
