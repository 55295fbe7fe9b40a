// Blocking TCP sockets for the rendezvous of a multi-process run (only its small control
// messages; the collectives' data goes through Gloo and NCCL), and the frames they carry.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::distribute::bootstrap {

using Clock = std::chrono::steady_clock;

// A file descriptor closed when it goes out of scope.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() noexcept;

 private:
  int fd_ = -1;
};

// Listens on address:port only (not on every interface). Throws Unavailable naming the address
// and the reason (the port is taken, the address is not one of this host's).
Socket listen_on(const std::string& address, int port);
// Connects, retrying until the deadline while nobody listens yet (process 0 may start last).
Socket connect_to(const std::string& address, int port, Clock::time_point deadline);
// The address of this host's interface that routes toward `address` (no packet is sent).
std::string local_address_toward(const std::string& address, int port);
// The address a connected socket's peer comes from ("an unknown peer" when it cannot be read).
std::string peer_address(int fd);
std::string host_name();

// Frames: a 4-byte little-endian length, then the payload. send_frame throws Unavailable when
// the peer is gone; recv_frame returns false at an orderly end of stream and throws
// DeadlineExceeded at the deadline.
void send_frame(int fd, std::string_view payload);
bool recv_frame(int fd, std::string* payload, Clock::time_point deadline);
// Takes one whole frame off the front of `inbox` (bytes as they arrived); false while none is
// complete. Throws DataLoss for a length no rendezvous frame has.
bool take_frame(std::string& inbox, std::string* payload);

// A payload built and read field by field: u32 numbers and length-prefixed strings.
class FrameWriter {
 public:
  FrameWriter& u32(uint32_t v);
  FrameWriter& str(std::string_view s);
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

class FrameReader {
 public:
  explicit FrameReader(std::string_view in) : in_(in) {}
  uint32_t u32();
  std::string str();
  bool done() const { return in_.empty(); }  // nothing left (a field a later version appends)

 private:
  std::string_view in_;
};

}  // namespace tandem::distribute::bootstrap
