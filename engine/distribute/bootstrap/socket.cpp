// POSIX sockets with every call checked: the call, the address and errno in the message.
#include "engine/distribute/bootstrap/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "engine/core/error.h"

namespace tandem::distribute::bootstrap {
namespace {

constexpr uint32_t kMaxFrame = 64u << 20;  // a rendezvous message is small; more is a stray peer

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) freeaddrinfo(list);
  }
};

void resolve(const std::string& address, int port, int socktype, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(address.c_str(), service.c_str(), &hints, &out->list);
  TANDEM_CHECK(rc == 0, ErrorCode::kUnavailable, "cannot resolve the rendezvous address {}:{}: getaddrinfo: {}",
               address, port, gai_strerror(rc));
}

std::string errno_text() { return std::strerror(errno); }

// An IPv4 or IPv6 address as text; empty when inet_ntop refuses it.
std::string address_text(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* where = a.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&a)->sin_addr);
  return ::inet_ntop(a.ss_family, where, text, sizeof text) != nullptr ? std::string(text) : std::string();
}

// Waits until fd is readable; false at the deadline.
bool wait_readable(int fd, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc > 0) return true;
    TANDEM_CHECK(rc == 0 || errno == EINTR, ErrorCode::kUnavailable, "poll on the rendezvous socket: {}",
                 errno_text());
  }
}

// Reads exactly n bytes: false at end of stream before the first byte.
bool recv_exact(int fd, char* buf, size_t n, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    TANDEM_CHECK(wait_readable(fd, deadline), ErrorCode::kDeadlineExceeded,
                 "the rendezvous peer sent nothing in time");
    ssize_t r = ::recv(fd, buf + got, n - got, 0);
    if (r == 0) {
      TANDEM_CHECK(got == 0, ErrorCode::kUnavailable, "the rendezvous peer closed the connection mid-message");
      return false;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET) return false;
      throw Error(ErrorCode::kUnavailable, fmt::format("recv from the rendezvous peer: {}", errno_text()));
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() noexcept {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

Socket listen_on(const std::string& address, int port) {
  AddrInfo ai;
  resolve(address, port, SOCK_STREAM, &ai);
  std::string last;
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      last = "socket: " + errno_text();
      continue;
    }
    int one = 1;
    TANDEM_CHECK(::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0, ErrorCode::kUnavailable,
                 "setsockopt(SO_REUSEADDR) on the rendezvous socket: {}", errno_text());
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0) {
      last = "bind: " + errno_text();
      continue;
    }
    if (::listen(s.fd(), 64) != 0) {
      last = "listen: " + errno_text();
      continue;
    }
    return s;
  }
  throw Error(ErrorCode::kUnavailable,
              fmt::format("process 0 cannot listen for the rendezvous on {}:{} ({}): another run may hold the port "
                          "(set MASTER_PORT or distribute.port), or the address is not one of this host's (set "
                          "MASTER_ADDR to the host of process 0)",
                          address, port, last));
}

Socket connect_to(const std::string& address, int port, Clock::time_point deadline) {
  std::string last;
  for (;;) {
    AddrInfo ai;
    resolve(address, port, SOCK_STREAM, &ai);
    for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) {
        last = "socket: " + errno_text();
        continue;
      }
      if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0) {
        int one = 1;
        ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small messages; best effort
        return s;
      }
      last = "connect: " + errno_text();
    }
    TANDEM_CHECK(Clock::now() < deadline, ErrorCode::kDeadlineExceeded,
                 "no rendezvous at {}:{} in time ({}): is process 0 running, and is that its address?", address,
                 port, last);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string local_address_toward(const std::string& address, int port) {
  AddrInfo ai;
  resolve(address, port, SOCK_DGRAM, &ai);
  Socket s(::socket(ai.list->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  TANDEM_CHECK(s.valid(), ErrorCode::kUnavailable, "socket(SOCK_DGRAM): {}", errno_text());
  // A datagram socket's connect only picks the route; nothing is sent.
  TANDEM_CHECK(::connect(s.fd(), ai.list->ai_addr, ai.list->ai_addrlen) == 0, ErrorCode::kUnavailable,
               "no route from this host toward {}:{}: {}", address, port, errno_text());
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  TANDEM_CHECK(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&local), &len) == 0, ErrorCode::kUnavailable,
               "getsockname: {}", errno_text());
  std::string text = address_text(local);
  TANDEM_CHECK(!text.empty(), ErrorCode::kUnavailable, "inet_ntop: {}", errno_text());
  return text;
}

std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  std::string text = ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? address_text(a) : "";
  return text.empty() ? "an unknown peer" : text;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

void send_frame(int fd, std::string_view payload) {
  std::string frame(4, '\0');
  auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) frame[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  frame.append(payload);
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t w = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    TANDEM_CHECK(w > 0, ErrorCode::kUnavailable, "send to the rendezvous peer: {}", errno_text());
    sent += static_cast<size_t>(w);
  }
}

bool recv_frame(int fd, std::string* payload, Clock::time_point deadline) {
  unsigned char head[4];
  if (!recv_exact(fd, reinterpret_cast<char*>(head), 4, deadline)) return false;
  uint32_t n = head[0] | head[1] << 8 | head[2] << 16 | static_cast<uint32_t>(head[3]) << 24;
  TANDEM_CHECK(n <= kMaxFrame, ErrorCode::kDataLoss,
               "a rendezvous message of {} bytes: the peer does not speak Tandem's rendezvous", n);
  payload->resize(n);
  TANDEM_CHECK(n == 0 || recv_exact(fd, payload->data(), n, deadline), ErrorCode::kUnavailable,
               "the rendezvous peer closed the connection mid-message");
  return true;
}

bool take_frame(std::string& inbox, std::string* payload) {
  if (inbox.size() < 4) return false;
  const auto* head = reinterpret_cast<const unsigned char*>(inbox.data());
  const uint32_t n = head[0] | head[1] << 8 | head[2] << 16 | static_cast<uint32_t>(head[3]) << 24;
  TANDEM_CHECK(n <= kMaxFrame, ErrorCode::kDataLoss,
               "a rendezvous message of {} bytes: the peer does not speak Tandem's rendezvous", n);
  if (inbox.size() < 4 + static_cast<size_t>(n)) return false;
  payload->assign(inbox, 4, n);
  inbox.erase(0, 4 + static_cast<size_t>(n));
  return true;
}

FrameWriter& FrameWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  return *this;
}

FrameWriter& FrameWriter::str(std::string_view s) {
  u32(static_cast<uint32_t>(s.size()));
  out_.append(s);
  return *this;
}

uint32_t FrameReader::u32() {
  TANDEM_CHECK(in_.size() >= 4, ErrorCode::kDataLoss, "a truncated rendezvous message");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(in_[static_cast<size_t>(i)])) << (8 * i);
  in_.remove_prefix(4);
  return v;
}

std::string FrameReader::str() {
  uint32_t n = u32();
  TANDEM_CHECK(in_.size() >= n, ErrorCode::kDataLoss, "a truncated rendezvous message");
  std::string s(in_.substr(0, n));
  in_.remove_prefix(n);
  return s;
}

}  // namespace tandem::distribute::bootstrap
