// A queue bounded both in elements and in bytes, whose waits end when the pipeline's stop
// token fires, so a destroyed or failed pipeline never leaves a thread blocked in it.
// One element is always admitted into an empty queue, so a single huge element cannot deadlock.
// The element bound can change while running (autotuned prefetch grows it, autotune.h).
// Producers blocked on a full queue are woken once it has drained to half its element bound,
// not at every pop: a reader refills in bursts instead of waking (and taking a core from the
// consumer) once per element, and the consumer still finds half a queue ready.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <stop_token>
#include <utility>

namespace tandem::data {

template <typename T>
class BoundedQueue {
 public:
  BoundedQueue(size_t max_elements, size_t max_bytes) : max_elements_(max_elements), max_bytes_(max_bytes) {}

  // Blocks while full; false when stopped before there was room.
  bool push(T item, size_t bytes, std::stop_token stop) {
    std::unique_lock lock(mutex_);
    bool ok = space_.wait(lock, stop, [&] { return closed_ || has_room(bytes); });
    if (!ok || closed_) {
      return false;
    }
    items_.emplace_back(std::move(item), bytes);
    bytes_ += bytes;
    // Reaching the element bound means the producer could have run further ahead: the signal
    // that a larger buffer would help (BufferTuner).
    if (items_.size() >= max_elements_) filled_ = true;
    ready_.notify_one();
    return true;
  }

  // Blocks while empty and open; false when stopped, or closed and drained.
  bool pop(T* out, std::stop_token stop) {
    std::unique_lock lock(mutex_);
    bool ok = ready_.wait(lock, stop, [&] { return closed_ || !items_.empty(); });
    if (!ok || items_.empty()) {
      return false;
    }
    *out = std::move(items_.front().first);
    bytes_ -= items_.front().second;
    items_.pop_front();
    if (items_.size() <= max_elements_ / 2) space_.notify_all();
    return true;
  }

  // No more pushes; pop drains what is there and then returns false.
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    ready_.notify_all();
    space_.notify_all();
  }

  void set_max_elements(size_t max_elements) {
    std::lock_guard lock(mutex_);
    max_elements_ = max_elements;
    space_.notify_all();
  }

  // Whether the queue reached its element bound since the last call.
  bool take_filled() {
    std::lock_guard lock(mutex_);
    return std::exchange(filled_, false);
  }

  size_t size() const {
    std::lock_guard lock(mutex_);
    return items_.size();
  }
  size_t bytes() const {
    std::lock_guard lock(mutex_);
    return bytes_;
  }

 private:
  bool has_room(size_t bytes) const {
    return items_.empty() || (items_.size() < max_elements_ && bytes_ + bytes <= max_bytes_);
  }

  size_t max_elements_;
  const size_t max_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable_any ready_;
  std::condition_variable_any space_;
  std::deque<std::pair<T, size_t>> items_;
  size_t bytes_ = 0;
  bool closed_ = false;
  bool filled_ = false;
};

}  // namespace tandem::data
