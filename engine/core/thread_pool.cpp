#include "engine/core/thread_pool.h"

#include <algorithm>
#include <system_error>

#include "engine/core/error.h"

namespace tandem {

ThreadPool::ThreadPool(int num_threads, std::string name) {
  TANDEM_CHECK(num_threads > 0, ErrorCode::kInvalidArgument, "thread pool '{}' needs at least one thread, got {}",
               name, num_threads);
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) {
    try {
      threads_.emplace_back([this] { worker_loop(); });
    } catch (const std::exception& e) {  // std::system_error, or std::bad_alloc for the thread's state
      // The threads already started are stopped and joined here: a destructor never runs for a
      // constructor that throws, and a joinable std::thread destroyed would abort the process.
      stop_and_join();
      throw_error(ErrorCode::kResourceExhausted,
                  "thread pool '{}': starting thread {} of {} failed: {}; lower the thread count (num_parallel_calls, "
                  "threads_per_replica) or raise the process's thread limit (ulimit -u)",
                  name, i + 1, num_threads, e.what());
    }
  }
}

ThreadPool::~ThreadPool() { stop_and_join(); }

void ThreadPool::stop_and_join() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void ThreadPool::enqueue(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    TANDEM_CHECK(!stopping_, ErrorCode::kFailedPrecondition, "task submitted to a thread pool that is stopping");
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left to do
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t)>& body) {
  if (end <= begin) return;
  int64_t chunks = std::min<int64_t>(end - begin, size());
  int64_t per_chunk = (end - begin + chunks - 1) / chunks;
  std::vector<std::future<void>> done;
  for (int64_t lo = begin; lo < end; lo += per_chunk) {
    int64_t hi = std::min(end, lo + per_chunk);
    done.push_back(submit([lo, hi, &body] {
      for (int64_t i = lo; i < hi; ++i) body(i);
    }));
  }
  for (auto& f : done) f.wait();
  for (auto& f : done) f.get();  // rethrows the first failure, after all chunks have finished
}

}  // namespace tandem
