#include "engine/train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "engine/core/error.h"

namespace tandem::train {
namespace {

// A handler may only touch lock-free atomics (and call async-signal-safe functions).
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> g_stop{0};
std::atomic<bool> g_installed{false};
struct sigaction g_previous_int, g_previous_term, g_previous_hup;

extern "C" void on_stop_signal(int signal_number) {
  const int saved_errno = errno;  // the interrupted code may be about to read it
  int none = 0;
  if (!g_stop.compare_exchange_strong(none, signal_number)) {
    // The second request: stop now, as if no handler were installed.
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
    return;
  }
  static const char kMessage[] =
      "\ntandem: stop requested: finishing the step and saving a checkpoint (send the signal again to stop at "
      "once)\n";
  [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  errno = saved_errno;
}

// Returns false when sigaction fails. A signal the process ignores (a background job's SIGINT)
// stays ignored, as the shell meant.
bool install(int signal_number, struct sigaction* previous) {
  if (::sigaction(signal_number, nullptr, previous) != 0) return false;
  if (previous->sa_handler == SIG_IGN) return true;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and waits go on; the trainer polls the flag each step
  return ::sigaction(signal_number, &action, nullptr) == 0;
}

}  // namespace

StopSignals::StopSignals() {
  TANDEM_CHECK(!g_installed.exchange(true), ErrorCode::kFailedPrecondition,
               "StopSignals: the stop handlers are installed already (one StopSignals per process at a time)");
  g_stop.store(0);
  // SIGHUP: an ssh session that drops sends it; it stops the run as SIGTERM does, with a checkpoint.
  const bool ok = install(SIGINT, &g_previous_int) && install(SIGTERM, &g_previous_term) &&
                  install(SIGHUP, &g_previous_hup);
  if (!ok) {
    const int err = errno;
    ::sigaction(SIGINT, &g_previous_int, nullptr);
    ::sigaction(SIGTERM, &g_previous_term, nullptr);
    g_installed.store(false);
    throw_error(ErrorCode::kInternal, "sigaction failed: cannot install the SIGINT/SIGTERM/SIGHUP stop handlers (errno {})",
                err);
  }
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGHUP, &g_previous_hup, nullptr);
  g_installed.store(false);
}

const std::atomic<int>& StopSignals::flag() const { return g_stop; }

}  // namespace tandem::train
