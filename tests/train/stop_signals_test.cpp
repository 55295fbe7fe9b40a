// SIGINT, SIGTERM and SIGHUP (a dropped ssh session) while StopSignals lives: the first one only sets the flag the trainer polls
// (the process goes on); a second one takes the default action (checked in a child process);
// the previous handlers come back afterwards.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "engine/core/error.h"
#include "engine/train/stop_signals.h"

namespace tandem::train {
namespace {

TEST(StopSignals, TheFirstSignalOnlyAsksToStop) {
  for (int signal_number : {SIGTERM, SIGINT, SIGHUP}) {
    StopSignals signals;
    EXPECT_EQ(signals.flag().load(), 0);
    ASSERT_EQ(::raise(signal_number), 0);
    EXPECT_EQ(signals.flag().load(), signal_number);  // and this process is still here
  }
}

TEST(StopSignals, TheSecondSignalStopsAtOnce) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopSignals signals;
    ::raise(SIGTERM);
    ::raise(SIGTERM);
    ::_exit(0);  // not reached: the second SIGTERM kills
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(StopSignals, PreviousHandlersComeBackAndOnlyOneMayBeInstalled) {
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &before), 0);
  {
    StopSignals signals;
    EXPECT_THROW(StopSignals second, Error);
  }
  struct sigaction after {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(StopSignals, ASignalTheProcessIgnoresStaysIgnored) {
  // A background job (`trainer ... &`) starts with SIGINT ignored: Ctrl-C at the terminal is not for it.
  struct sigaction ignore {}, before {}, during {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGINT, &ignore, &before), 0);
  {
    StopSignals signals;
    ASSERT_EQ(::sigaction(SIGINT, nullptr, &during), 0);
    EXPECT_EQ(during.sa_handler, SIG_IGN);
  }
  ::sigaction(SIGINT, &before, nullptr);
}

}  // namespace
}  // namespace tandem::train
