// Recording the ops of one forward pass, for an exporter (engine/export), as torch.jit.trace does:
// while a Tracer is installed on a thread, every op that goes through make_op is appended in order
// with its inputs and output, and an op whose meaning needs more than its tensors' shapes (a
// convolution's stride, a permutation, a causal mask) adds its attributes just before. Ops that
// never reach make_op (a Dropout module in eval mode returns its input) leave no trace: they are
// identities. Tracing costs one thread-local read per op when no tracer is installed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/tensor.h"

namespace tandem::autograd {

class Variable;

using TraceAttribute = std::variant<int64_t, double, std::string, std::vector<int64_t>, Tensor>;
using TraceAttributes = std::map<std::string, TraceAttribute>;

struct TracedOp {
  std::string op;              // make_op's name: "conv2d", "layer_norm", ...
  std::vector<Tensor> inputs;  // the values of the op's Variable inputs, in make_op's order
  Tensor output;
  TraceAttributes attributes;  // empty for ops that need none
};

// The ops of one pass. It holds every traced tensor, so no storage is reused while it lives and a
// tensor's data pointer names one value of the pass.
class Tracer {
 public:
  const std::vector<TracedOp>& ops() const { return ops_; }
  // Attributes set for an op that never recorded itself (it threw after trace_attributes): empty
  // after a pass that finished.
  const std::string& pending_op() const { return pending_op_; }

 private:
  friend void trace_op(const std::string&, const std::vector<Variable>&, const Tensor&);
  friend void trace_attributes(const char*, TraceAttributes);
  std::vector<TracedOp> ops_;
  std::string pending_op_;
  TraceAttributes pending_;
};

// Installs a tracer on this thread for the guard's lifetime (guards nest: the inner one wins).
class TraceGuard {
 public:
  explicit TraceGuard(Tracer& tracer);
  ~TraceGuard();
  TraceGuard(const TraceGuard&) = delete;
  TraceGuard& operator=(const TraceGuard&) = delete;

 private:
  Tracer* previous_;
};

// Whether a tracer is installed on this thread: ops build their attributes only then.
bool tracing();

// Called by make_op for every op.
void trace_op(const std::string& op, const std::vector<Variable>& inputs, const Tensor& output);

// Called by an op just before its make_op: attributes for the next op recorded, which must be `op`.
void trace_attributes(const char* op, TraceAttributes attributes);

}  // namespace tandem::autograd
