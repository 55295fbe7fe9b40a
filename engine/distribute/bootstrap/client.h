// Every process's side of the rendezvous (process 0 also runs the Server): join the run, then a
// key-value store for the collectives' bootstrap (Gloo's addresses, NCCL's unique id), and the
// question "which process is gone?" that turns a broken connection into an error naming it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/distribute/bootstrap/protocol.h"
#include "engine/distribute/bootstrap/socket.h"

namespace tandem::distribute::bootstrap {

class Server;

struct JoinOptions {
  std::string address;  // the rendezvous: process 0 listens there
  int port = 0;
  int rank = 0;
  int size = 1;
  int local_replicas = 1;
  ProcessIdentity identity;
  std::string token;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // to join, and for each get
};

class Client {
 public:
  // Joins (process 0 first starts the server); returns once every process has joined. Throws
  // PermissionDenied-like FailedPrecondition with the server's reason when refused, or
  // DeadlineExceeded when the others do not come in time.
  explicit Client(const JoinOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(hosts_.size()); }
  const std::vector<std::string>& hosts() const { return hosts_; }  // by process rank
  // How errors name process p: "process 1 on host-b (pid 42, replicas 2 to 3)".
  const std::string& who(int p) const { return whos_[static_cast<size_t>(p)]; }

  void set(const std::string& key, const std::string& value);
  // Waits until some process has set key (up to the timeout).
  std::string get(const std::string& key);
  // Whether some process has set key; never waits.
  bool has(const std::string& key);
  // Process 0 runs compute and shares its result under key; the others wait for it. When compute
  // throws on process 0, it shares that too and rethrows, and the others throw Aborted saying
  // "process 0 could not <what>: <why>" at once instead of waiting out the timeout.
  std::string share_from_process_zero(const std::string& key, const std::string& what,
                                      const std::function<std::string()>& compute);
  // The processes whose connection to process 0 closed without their goodbye, or process 0 itself
  // when it cannot be reached: "" when none.
  std::string departed();
  // This process is done: its connection closing from now on is not a failure. Not said on
  // destruction: a process that ends without it counts as departed.
  void goodbye() noexcept;
  // This process failed and is leaving: the others' errors quote the reason.
  void report_failure(const std::string& reason) noexcept;

 private:
  std::string request(const std::string& payload, Op expect, const std::string& what);
  void last_word(const std::string& payload) noexcept;  // kBye or kFailed, once

  int rank_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;  // process 0 only
  Socket socket_;
  std::mutex mutex_;  // one request at a time on the socket
  std::vector<std::string> hosts_, whos_;
  bool bye_ = false;
};

}  // namespace tandem::distribute::bootstrap
