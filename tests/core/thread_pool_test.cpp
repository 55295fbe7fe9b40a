// ThreadPool when the system refuses a thread: the constructor joins the threads it started and
// throws ResourceExhausted, where a joinable std::thread destroyed during unwinding once aborted
// the whole process (std::terminate).
#include "engine/core/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "engine/core/error.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TANDEM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TANDEM_TEST_SANITIZED 1
#endif
#endif

namespace tandem {
namespace {

// This process's address space now, in bytes (the first field of /proc/self/statm, in pages).
long long address_space_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long long pages = -1;
  if (std::fscanf(f, "%lld", &pages) != 1) pages = -1;
  std::fclose(f);
  return pages < 0 ? -1 : pages * ::sysconf(_SC_PAGESIZE);
}

// In the death-test child: 64 MiB of address space to spare, where 1000 threads need a stack of
// 2 to 8 MiB each, so one of the first few dozen cannot start. 0: the pool threw ResourceExhausted
// naming the thread; 1: another error; 2: no error; 3: the limit could not be set.
[[noreturn]] void start_too_many_threads() {
  const long long used = address_space_bytes();
  if (used <= 0) ::_exit(3);
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
  const rlim_t wanted = static_cast<rlim_t>(used + (64ll << 20));
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < wanted) ::_exit(3);
  limit.rlim_cur = wanted;
  if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
  try {
    ThreadPool pool(1000, "probe");
  } catch (const Error& e) {
    const std::string message = e.what();
    const bool named = message.find("thread pool 'probe': starting thread ") != std::string::npos &&
                       message.find(" of 1000 failed") != std::string::npos;
    ::_exit(e.code() == ErrorCode::kResourceExhausted && named ? 0 : 1);
  } catch (...) {
    ::_exit(1);
  }
  ::_exit(2);
}

TEST(ThreadPoolDeathTest, AThreadThatCannotStartIsAnErrorNotAnAbort) {
#ifdef TANDEM_TEST_SANITIZED
  GTEST_SKIP() << "sanitizers reserve terabytes of address space: an RLIMIT_AS cannot be set under them";
#endif
  // The child re-runs this binary, so other tests' threads play no part in the fork.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(start_too_many_threads(), ::testing::ExitedWithCode(0), "")
      << "1: another error, 2: all 1000 threads started, 3: RLIMIT_AS could not be set; a signal (SIGABRT): "
         "std::terminate on a joinable thread";
}

}  // namespace
}  // namespace tandem
