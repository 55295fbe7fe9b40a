// Process 0's side of the rendezvous: a thread that admits the processes of one run (refusing
// any whose config, version, run id or token differ, without stopping the run), serves the
// key-value store Gloo and NCCL bootstrap from, and notices a process whose connection drops.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/distribute/bootstrap/protocol.h"
#include "engine/distribute/bootstrap/socket.h"

namespace tandem::distribute::bootstrap {

class Server {
 public:
  // Listens on address:port at once (throws Unavailable when it cannot); `self` is process 0's
  // own Hello, against which every other is checked.
  Server(const std::string& address, int port, Hello self);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // "1, 3": the ranks that have not joined (empty once all have), for process 0's own join
  // timeout to name them.
  std::string missing_ranks() const;

 private:
  struct Conn {
    Socket socket;
    std::string peer;              // address:port it came from, for the refusal log
    int rank = -1;                 // once admitted
    bool said_bye = false;
    std::vector<std::string> gets; // keys it waits for
    std::string inbox;             // bytes received that do not make a whole frame yet
  };
  void loop();
  // Reads what the connection has now, without waiting, and handles each whole frame; false when
  // it is to be closed. A slow or stray client never holds up the others.
  bool serve(Conn& conn);
  // Handles one request; false when the connection is to be closed.
  bool handle(Conn& conn, const std::string& payload);
  bool admit(Conn& conn, FrameReader& in);
  void welcome_all();
  void answer_gets();
  void closed(Conn& conn);
  std::string departed_text() const;

  Hello self_;
  Socket listener_;
  Socket wake_read_, wake_write_;  // the destructor's way to end poll()
  std::vector<Conn> conns_;
  std::vector<Hello> joined_;       // by rank; rank -1 where not yet joined
  mutable std::mutex present_mutex_;  // present_ is read by missing_ranks() from another thread
  std::vector<bool> present_;
  std::vector<std::string> departed_;  // "process 1 on host-b (pid 4242) left without a word"
  std::vector<std::string> failures_;  // by rank: what a process reported before leaving
  bool welcomed_ = false;
  std::map<std::string, std::string> values_;
  std::thread thread_;
};

}  // namespace tandem::distribute::bootstrap
