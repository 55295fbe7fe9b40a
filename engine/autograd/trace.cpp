#include "engine/autograd/trace.h"

#include "engine/autograd/variable.h"

namespace tandem::autograd {
namespace {
thread_local Tracer* active = nullptr;
}  // namespace

TraceGuard::TraceGuard(Tracer& tracer) : previous_(active) { active = &tracer; }
TraceGuard::~TraceGuard() { active = previous_; }

bool tracing() { return active != nullptr; }

void trace_attributes(const char* op, TraceAttributes attributes) {
  if (active == nullptr) return;
  active->pending_op_ = op;
  active->pending_ = std::move(attributes);
}

void trace_op(const std::string& op, const std::vector<Variable>& inputs, const Tensor& output) {
  if (active == nullptr) return;
  TracedOp traced{op, {}, output, {}};
  for (const Variable& in : inputs) traced.inputs.push_back(in.value());
  if (!active->pending_op_.empty()) {
    // An op that sets attributes and then runs another op first would hand them to the wrong one.
    TANDEM_CHECK(active->pending_op_ == op, ErrorCode::kInternal,
                 "trace: attributes set for op '{}' reached op '{}'", active->pending_op_, op);
    traced.attributes = std::move(active->pending_);
    active->pending_op_.clear();
    active->pending_.clear();
  }
  active->ops_.push_back(std::move(traced));
}

}  // namespace tandem::autograd
