// One trainer per run directory: a second lock on a held directory fails naming the holder; a lock
// file left by a process that died is taken over; a released lock leaves nothing stale.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <string>

#include "engine/core/error.h"
#include "engine/train/run_lock.h"
#include "tests/support/temp_dir.h"

namespace tandem::train {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(RunDirectoryLock, ASecondTrainerIsToldWhoHoldsTheDirectory) {
  ::tandem::testing::TempDir tmp;
  RunDirectoryLock first(tmp.path() / "run");
  EXPECT_NE(read_file(first.path()).find(fmt::format("pid {} since", ::getpid())), std::string::npos);
  try {
    RunDirectoryLock second(tmp.path() / "run");
    FAIL() << "two locks on one run directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    const std::string what = e.what();
    EXPECT_NE(what.find("is in use by another trainer"), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("pid {}", ::getpid())), std::string::npos) << what;
    EXPECT_NE(what.find("--run-dir"), std::string::npos) << what;
  }
}

TEST(RunDirectoryLock, AnotherProcessHoldingItIsNamed) {
  ::tandem::testing::TempDir tmp;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // holds the lock until killed; never returns into gtest
    try {
      RunDirectoryLock held(tmp.path() / "run");
      char c = 1;
      [[maybe_unused]] auto n = ::write(ready[1], &c, 1);
      ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(ready[1]);  // a child that fails closes the pipe's last writer: the read below returns 0
  char c = 0;
  const ssize_t got = ::read(ready[0], &c, 1);
  if (got != 1) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    FAIL() << "the child could not take the lock";
  }
  try {
    RunDirectoryLock mine(tmp.path() / "run");
    ADD_FAILURE() << "the child holds the lock";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("pid {}", child)), std::string::npos) << e.what();
  }
  ::kill(child, SIGKILL);  // dies without cleaning up: its lock file still names it
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  RunDirectoryLock taken(tmp.path() / "run");
  EXPECT_NE(taken.stale_holder().find(fmt::format("pid {}", child)), std::string::npos) << taken.stale_holder();
}

TEST(RunDirectoryLock, AReleasedLockIsNotStale) {
  ::tandem::testing::TempDir tmp;
  { RunDirectoryLock first(tmp.path()); }
  RunDirectoryLock second(tmp.path());
  EXPECT_EQ(second.stale_holder(), "");
}

}  // namespace
}  // namespace tandem::train
