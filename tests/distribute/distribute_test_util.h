// Shared by the distribute tests: run a body on R real replica threads, bounded by a time limit
// so a bug fails the test binary loudly instead of hanging it; and the error a rank threw.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace tandem::testing {

// Runs body(rank) for rank 0..R-1 on R threads; returns what each rank threw (nullptr: nothing).
// If they are not all finished within limit, prints which ranks are stuck and aborts the binary.
std::vector<std::exception_ptr> run_ranks(int ranks, const std::function<void(int)>& body,
                                          std::chrono::milliseconds limit = std::chrono::seconds(60));

// Rethrows the first rank error, for tests that expect none.
void expect_no_errors(const std::vector<std::exception_ptr>& errors);

struct CaughtError {
  bool thrown = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};
CaughtError caught(const std::exception_ptr& error);

}  // namespace tandem::testing
