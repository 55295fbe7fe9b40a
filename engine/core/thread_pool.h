// A fixed set of worker threads running queued tasks, for loader stages and parallel loops.
// Destruction finishes the queued tasks and joins every thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads, std::string name = "pool");
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }

  // Runs task on a worker; the future carries its result or its exception.
  template <typename F>
  auto submit(F task) -> std::future<decltype(task())> {
    using R = decltype(task());
    auto packaged = std::make_shared<std::packaged_task<R()>>(std::move(task));
    std::future<R> result = packaged->get_future();
    enqueue([packaged] { (*packaged)(); });
    return result;
  }

  // Runs body(i) for i in [begin, end) across the workers and waits; rethrows the first exception.
  void parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t)>& body);

 private:
  void enqueue(std::function<void()> task);
  void worker_loop();
  void stop_and_join();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem
