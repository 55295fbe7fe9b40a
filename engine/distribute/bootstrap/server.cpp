// One thread, one poll() over the listener and every connection; a connection's bytes are read as
// they come (never waiting for the rest of a frame), requests are answered in arrival order, and a
// get waits (inside the server) until its key is set.
#include "engine/distribute/bootstrap/server.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace tandem::distribute::bootstrap {
namespace {

// Whatever a reply meets (a peer gone mid-reply), the server goes on: the peer's end shows as a
// closed connection at the next poll.
void reply(int fd, const std::string& payload) noexcept {
  try {
    send_frame(fd, payload);
  } catch (const Error&) {
  }
}

std::string value_reply(const std::string& value) {
  return FrameWriter().u32(static_cast<uint32_t>(Op::kValue)).str(value).bytes();
}

}  // namespace

Server::Server(const std::string& address, int port, Hello self)
    : self_(std::move(self)), listener_(listen_on(address, port)) {
  int fds[2];
  TANDEM_CHECK(::pipe2(fds, O_CLOEXEC) == 0, ErrorCode::kUnavailable, "pipe2 for the rendezvous server: {}",
               std::strerror(errno));
  wake_read_ = Socket(fds[0]);
  wake_write_ = Socket(fds[1]);
  joined_.resize(self_.size);
  present_.assign(self_.size, false);
  failures_.resize(self_.size);
  thread_ = std::thread([this] { loop(); });
}

Server::~Server() {
  char c = 0;
  if (::write(wake_write_.fd(), &c, 1) < 0) {
    // The pipe cannot be full or closed here; nothing else can end the loop, so do not wait for it.
    thread_.detach();
    return;
  }
  thread_.join();
}

void Server::loop() {
  for (;;) {
    std::vector<pollfd> fds = {{wake_read_.fd(), POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
    for (const Conn& c : conns_) fds.push_back({c.socket.fd(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("rendezvous server: poll: {}; it stops serving", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;
    std::vector<size_t> gone;
    for (size_t i = 0; i < conns_.size(); ++i) {
      if (fds[i + 2].revents != 0 && !serve(conns_[i])) gone.push_back(i);
    }
    for (auto it = gone.rbegin(); it != gone.rend(); ++it) {
      closed(conns_[*it]);
      conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(*it));
    }
    if ((fds[1].revents & POLLIN) != 0) {
      int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        Conn c;
        c.socket = Socket(fd);
        c.peer = peer_address(fd);
        conns_.push_back(std::move(c));
      }
    }
  }
}

bool Server::serve(Conn& conn) {
  try {
    char buf[4096];
    std::string payload;
    // Frames are taken as they complete (a length no frame has is refused at its first 4 bytes, so
    // the inbox stays small), and a busy peer gets a bounded turn before poll() serves the others.
    for (int turn = 0; turn < 64; ++turn) {
      const ssize_t r = ::recv(conn.socket.fd(), buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        conn.inbox.append(buf, static_cast<size_t>(r));
        while (take_frame(conn.inbox, &payload)) {
          if (!handle(conn, payload)) return false;
        }
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;  // closed, or reset: its whole frames were handled above
    }
    return true;
  } catch (const Error& e) {
    spdlog::warn("rendezvous: dropped the connection from {}: {}", conn.peer, e.what());
    return false;
  }
}

std::string Server::missing_ranks() const {
  std::lock_guard lock(present_mutex_);
  std::string text;
  for (size_t r = 0; r < present_.size(); ++r) {
    if (!present_[r]) text += (text.empty() ? "" : ", ") + std::to_string(r);
  }
  return text;
}

bool Server::handle(Conn& conn, const std::string& payload) {
  FrameReader in(payload);
  auto op = static_cast<Op>(in.u32());
  if (conn.rank < 0 && op != Op::kHello) return false;  // nothing before the introduction
  switch (op) {
    case Op::kHello: return admit(conn, in);
    case Op::kSet: {
      std::string key = in.str();
      values_[key] = in.str();
      reply(conn.socket.fd(), FrameWriter().u32(static_cast<uint32_t>(Op::kAck)).bytes());
      answer_gets();
      return true;
    }
    case Op::kGet:
      conn.gets.push_back(in.str());
      answer_gets();
      return true;
    case Op::kDeparted: reply(conn.socket.fd(), value_reply(departed_text())); return true;
    case Op::kHas: reply(conn.socket.fd(), value_reply(values_.contains(in.str()) ? "1" : "0")); return true;
    case Op::kBye: conn.said_bye = true; return true;
    case Op::kFailed: {
      const Hello& h = joined_[static_cast<size_t>(conn.rank)];
      failures_[static_cast<size_t>(conn.rank)] = fmt::format("{} failed: {}", who(h), in.str());
      conn.said_bye = true;  // named by its failure, not as a silent departure
      return true;
    }
    default: return false;
  }
}

bool Server::admit(Conn& conn, FrameReader& in) {
  Hello h = decode_hello(in);
  std::string why = h.rank == 0 && h.pid == self_.pid && h.host == self_.host ? std::string() : refusal(self_, h);
  if (why.empty() && present_[h.rank]) {
    const Hello& other = joined_[h.rank];
    why = fmt::format("rank {} has joined already, from {} (pid {}); this one is on {} (pid {})", h.rank, other.host,
                      other.pid, h.host, h.pid);
  }
  if (!why.empty()) {
    spdlog::warn("rendezvous: refused a process from {}: {}", conn.peer, why);
    reply(conn.socket.fd(), FrameWriter().u32(static_cast<uint32_t>(Op::kRefused)).str(why).bytes());
    return false;
  }
  if (welcomed_) {
    // A process that left and came back cannot rejoin a group that has formed.
    reply(conn.socket.fd(), FrameWriter().u32(static_cast<uint32_t>(Op::kRefused))
                                .str("the run's processes have all joined already; restart every process")
                                .bytes());
    return false;
  }
  conn.rank = static_cast<int>(h.rank);
  joined_[h.rank] = h;
  {
    std::lock_guard lock(present_mutex_);
    present_[h.rank] = true;
  }
  welcome_all();
  return true;
}

void Server::welcome_all() {
  for (bool p : present_) {
    if (!p) return;
  }
  FrameWriter w;
  w.u32(static_cast<uint32_t>(Op::kWelcome)).u32(self_.size);
  for (const Hello& h : joined_) w.str(h.host).str(who(h));
  for (const Conn& c : conns_) {
    if (c.rank >= 0) reply(c.socket.fd(), w.bytes());
  }
  welcomed_ = true;
}

void Server::answer_gets() {
  for (Conn& c : conns_) {
    std::erase_if(c.gets, [&](const std::string& key) {
      auto it = values_.find(key);
      if (it == values_.end()) return false;
      reply(c.socket.fd(), value_reply(it->second));
      return true;
    });
  }
}

void Server::closed(Conn& conn) {
  if (conn.rank < 0) return;
  if (!welcomed_) {  // it may come again before the group forms
    std::lock_guard lock(present_mutex_);
    present_[static_cast<size_t>(conn.rank)] = false;
  }
  if (conn.said_bye) return;
  const Hello& h = joined_[static_cast<size_t>(conn.rank)];
  departed_.push_back(fmt::format("{} left without a word (killed, or its host is down)", who(h)));
}

std::string Server::departed_text() const {
  std::string text;
  for (const std::string& f : failures_) {
    if (!f.empty()) text += (text.empty() ? "" : "; ") + f;
  }
  for (const std::string& d : departed_) text += (text.empty() ? "" : "; ") + d;
  return text;
}

}  // namespace tandem::distribute::bootstrap
