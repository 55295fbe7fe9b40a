// Replica threads for tests, with a hard time limit: a hang becomes an abort naming the stuck ranks.
#include "tests/distribute/distribute_test_util.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace tandem::testing {

std::vector<std::exception_ptr> run_ranks(int ranks, const std::function<void(int)>& body,
                                          std::chrono::milliseconds limit) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<bool> finished(static_cast<size_t>(ranks), false);
  std::mutex mutex;
  std::condition_variable done;
  int remaining = ranks;
  std::vector<std::thread> threads;
  // spdlog's registry is a function-local static of the uninstrumented libspdlog: made here, before
  // the replica threads (as the trainer's main thread makes it before its replicas start), or
  // ThreadSanitizer reads two replicas' first warnings as a race on it.
  spdlog::default_logger_raw();
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
      std::lock_guard lock(mutex);
      finished[static_cast<size_t>(r)] = true;
      --remaining;
      done.notify_all();
    });
  }
  std::unique_lock lock(mutex);
  if (!done.wait_for(lock, limit, [&] { return remaining == 0; })) {
    std::string stuck;
    for (int r = 0; r < ranks; ++r) {
      if (!finished[static_cast<size_t>(r)]) stuck += " " + std::to_string(r);
    }
    std::fprintf(stderr, "run_ranks: ranks%s still running after %lld ms: the test hangs\n", stuck.c_str(),
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();  // test code only: a hang must fail, and stuck threads cannot be joined
  }
  lock.unlock();
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

CaughtError caught(const std::exception_ptr& error) {
  CaughtError result;
  if (!error) return result;
  result.thrown = true;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    result.code = e.code();
    result.message = e.what();
  } catch (const std::exception& e) {
    result.message = e.what();
  }
  return result;
}

}  // namespace tandem::testing
