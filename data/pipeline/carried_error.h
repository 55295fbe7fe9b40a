// An error on its way from a loader thread to the consumer. It carries the code and message,
// not the exception object, and the consumer throws a fresh tandem::Error: an exception object
// shared between threads is freed by whichever drops it last, through libstdc++'s reference
// counts, which ThreadSanitizer cannot see (a false race in every TSan run otherwise).
#pragma once

#include <exception>
#include <string>

#include "engine/core/error.h"

namespace tandem::data {

class CarriedError {
 public:
  // Call inside a catch block: captures the exception being handled.
  static CarriedError capture() {
    CarriedError e;
    e.set_ = true;
    try {
      throw;
    } catch (const Error& error) {
      e.code_ = error.code();
      e.message_ = error.what();
    } catch (const std::exception& error) {
      e.code_ = ErrorCode::kInternal;
      e.message_ = error.what();
    } catch (...) {
      e.code_ = ErrorCode::kInternal;
      e.message_ = "a pipeline stage threw a non-standard exception";
    }
    return e;
  }

  explicit operator bool() const { return set_; }
  [[noreturn]] void rethrow() const { throw Error(code_, message_); }

 private:
  bool set_ = false;
  ErrorCode code_ = ErrorCode::kInternal;
  std::string message_;
};

}  // namespace tandem::data
