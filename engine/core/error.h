// The one error style of Tandem: library code throws tandem::Error with a code and a
// message that says what, where and what to do; only tools/ catches and picks the exit code.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

enum class ErrorCode {
  kInvalidArgument,    // the caller gave something wrong: a shape, a key, a value
  kNotFound,           // a file, key, library or device that is not there
  kOutOfRange,         // an index or position past the end
  kDataLoss,           // corrupt or truncated data
  kUnimplemented,      // an op a device does not provide
  kFailedPrecondition, // the system is not in a state to do this
  kResourceExhausted,  // out of memory or another budget
  kUnavailable,        // a device or library that cannot be used right now
  kDeadlineExceeded,   // a watchdog or timeout fired
  kAborted,            // stopped because another part failed first
  kInternal,           // a bug: an invariant broke, or a library call failed unexpectedly
};

std::string_view error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

template <typename... Args>
[[noreturn]] void throw_error(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tandem

// TANDEM_CHECK(cond, code, "format", args...): throws tandem::Error(code, message) when cond is false.
#define TANDEM_CHECK(cond, code, ...)         \
  do {                                        \
    if (!(cond)) [[unlikely]] {               \
      ::tandem::throw_error(code, __VA_ARGS__); \
    }                                         \
  } while (false)
