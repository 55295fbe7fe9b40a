// Shared by the autograd tests: inputs drawn from a seeded generator.
#pragma once

#include <cstdint>

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/autograd/gradcheck.h"
#include "engine/core/tensor.h"

namespace tandem::testing {

// A CPU f32 tensor of uniform draws in [lo, hi) from Generator(seed), in element order.
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// A CPU context with the checks the op tests share: gradients against central differences, and
// an error whose message holds `part` (and whose code is `code`, when given).
class OpTest : public ::testing::Test {
 protected:
  void expect_grads(const std::function<autograd::Variable(const std::vector<autograd::Variable>&)>& f,
                    const std::vector<Tensor>& inputs, const char* what) {
    autograd::GradCheckResult r = autograd::check_gradients(ctx_, f, inputs);
    EXPECT_TRUE(r.ok) << what << ": " << r.worst;
  }
  void expect_error(const std::function<void()>& f, const std::string& part,
                    std::optional<ErrorCode> code = ErrorCode::kInvalidArgument) {
    try {
      f();
      ADD_FAILURE() << "accepted; expected an error with '" << part << "'";
    } catch (const Error& e) {
      if (code) {
        EXPECT_EQ(e.code(), *code) << e.what();
      }
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

}  // namespace tandem::testing
