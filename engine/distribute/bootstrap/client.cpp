// Joining the run and the store's requests, one at a time over one connection to process 0.
#include "engine/distribute/bootstrap/client.h"

#include <unistd.h>

#include "engine/core/error.h"
#include "engine/distribute/bootstrap/server.h"

namespace tandem::distribute::bootstrap {

Client::Client(const JoinOptions& o) : rank_(o.rank), timeout_(o.timeout) {
  Hello self{.rank = static_cast<uint32_t>(o.rank), .size = static_cast<uint32_t>(o.size), .host = host_name(),
             .pid = static_cast<uint32_t>(::getpid()), .local_replicas = static_cast<uint32_t>(o.local_replicas),
             .identity = o.identity, .token_digest = token_digest(o.token)};
  if (o.rank == 0) server_ = std::make_unique<Server>(o.address, o.port, self);
  const auto deadline = Clock::now() + o.timeout;
  socket_ = connect_to(o.address, o.port, deadline);
  send_frame(socket_.fd(), encode(self));
  std::string payload;
  bool answered = false;
  try {
    answered = recv_frame(socket_.fd(), &payload, deadline);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kDeadlineExceeded) throw;
    const std::string missing = server_ ? server_->missing_ranks() : std::string();
    throw Error(ErrorCode::kDeadlineExceeded,
                fmt::format("process {} waited {} s at the rendezvous {}:{} for the run's {} processes, and {}: start "
                            "every process of the run (ranks 0 to {}) with this rendezvous address, or raise "
                            "distribute.watchdog_timeout_s",
                            o.rank, o.timeout.count() / 1000.0, o.address, o.port, o.size,
                            !server_ ? std::string("not all joined (process 0's error names the missing ranks)")
                            : missing.empty() ? std::string("all joined, but the answer did not arrive in time")
                                              : "process(es) " + missing + " are not there (never joined, or left)",
                            o.size - 1));
  }
  TANDEM_CHECK(answered, ErrorCode::kUnavailable,
               "the rendezvous at {}:{} closed the connection while process {} joined", o.address, o.port, o.rank);
  FrameReader in(payload);
  auto op = static_cast<Op>(in.u32());
  TANDEM_CHECK(op != Op::kRefused, ErrorCode::kFailedPrecondition, "the rendezvous at {}:{} refused this process: {}",
               o.address, o.port, in.str());
  TANDEM_CHECK(op == Op::kWelcome, ErrorCode::kDataLoss, "the rendezvous at {}:{} answered {} to a join",
               o.address, o.port, static_cast<uint32_t>(op));
  hosts_.resize(in.u32());
  whos_.resize(hosts_.size());
  for (size_t p = 0; p < hosts_.size(); ++p) {
    hosts_[p] = in.str();
    whos_[p] = in.str();
  }
}

Client::~Client() = default;

std::string Client::request(const std::string& payload, Op expect, const std::string& what) {
  std::lock_guard lock(mutex_);
  send_frame(socket_.fd(), payload);
  std::string answer;
  TANDEM_CHECK(recv_frame(socket_.fd(), &answer, Clock::now() + timeout_), ErrorCode::kUnavailable,
               "process 0 ({}) closed the rendezvous connection during {}", hosts_.empty() ? "?" : hosts_[0], what);
  FrameReader in(answer);
  TANDEM_CHECK(static_cast<Op>(in.u32()) == expect, ErrorCode::kDataLoss, "the rendezvous answered {} oddly", what);
  return expect == Op::kValue ? in.str() : std::string();
}

void Client::set(const std::string& key, const std::string& value) {
  request(FrameWriter().u32(static_cast<uint32_t>(Op::kSet)).str(key).str(value).bytes(), Op::kAck,
          "set '" + key + "'");
}

std::string Client::get(const std::string& key) {
  try {
    return request(FrameWriter().u32(static_cast<uint32_t>(Op::kGet)).str(key).bytes(), Op::kValue,
                   "get '" + key + "'");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kDeadlineExceeded) throw;
    throw Error(e.code(), fmt::format("no process set '{}' within {} s at the rendezvous: a process is missing or "
                                      "stalled during set-up",
                                      key, timeout_.count() / 1000.0));
  }
}

bool Client::has(const std::string& key) {
  return request(FrameWriter().u32(static_cast<uint32_t>(Op::kHas)).str(key).bytes(), Op::kValue,
                 "a look at '" + key + "'") == "1";
}

std::string Client::share_from_process_zero(const std::string& key, const std::string& what,
                                            const std::function<std::string()>& compute) {
  // The first byte says which it is: 'v' a value, 'e' process 0's error.
  if (rank_ == 0) {
    std::string value;
    try {
      value = compute();
    } catch (const Error& e) {
      set(key, std::string("e") + e.what());
      throw;
    }
    set(key, "v" + value);
    return value;
  }
  const std::string said = get(key);
  TANDEM_CHECK(!said.empty() && said[0] == 'v', ErrorCode::kAborted, "process 0 could not {}: {}", what,
               said.empty() ? std::string("(no reason)") : said.substr(1));
  return said.substr(1);
}

std::string Client::departed() {
  try {
    return request(FrameWriter().u32(static_cast<uint32_t>(Op::kDeparted)).bytes(), Op::kValue, "a status query");
  } catch (const Error&) {
    return whos_.empty() ? std::string("process 0") : whos_[0] + " cannot be reached";
  }
}

void Client::goodbye() noexcept { last_word(FrameWriter().u32(static_cast<uint32_t>(Op::kBye)).bytes()); }

void Client::report_failure(const std::string& reason) noexcept {
  try {
    last_word(FrameWriter().u32(static_cast<uint32_t>(Op::kFailed)).str(reason.substr(0, 4000)).bytes());
  } catch (const std::exception&) {  // the string's copy; nothing else throws here
  }
}

void Client::last_word(const std::string& payload) noexcept {
  std::lock_guard lock(mutex_);
  if (bye_ || !socket_.valid()) return;
  bye_ = true;
  try {
    send_frame(socket_.fd(), payload);
  } catch (const Error&) {
  }
}

}  // namespace tandem::distribute::bootstrap
