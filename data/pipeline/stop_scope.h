// A stop source that fires when its parent token does, or when its owner asks. Each threaded
// stage owns one and hands its token to its input, so stopping a stage stops its whole
// subtree (needed when a repeat or interleave drops an iterator while the pipeline goes on).
#pragma once

#include <functional>
#include <optional>
#include <stop_token>

namespace tandem::data {

class StopScope {
 public:
  explicit StopScope(const std::stop_token& parent) {
    link_.emplace(parent, std::function<void()>([this] { source_.request_stop(); }));
  }
  ~StopScope() { link_.reset(); }
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;

  std::stop_token token() const { return source_.get_token(); }
  void request_stop() { source_.request_stop(); }

 private:
  std::stop_source source_;
  std::optional<std::stop_callback<std::function<void()>>> link_;
};

}  // namespace tandem::data
