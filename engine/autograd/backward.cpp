// The backward pass: order the recorded graph, run each node's backward once every gradient
// of its output has arrived, and tell each leaf the moment its gradient is final, so a
// data-parallel reducer can start reducing it while backward goes on.
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "engine/autograd/variable.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

using VariablePtr = std::shared_ptr<VariableData>;

// A second backward through a graph must fail, not treat the freed ops as leaves (which gave the
// loss a gradient of 1 and its parameters none).
// `consumer` names the op that took v as input; null when v is the loss itself.
void check_not_freed(const VariableData& v, const std::string* consumer) {
  if (!v.graph_freed) return;
  throw_error(ErrorCode::kFailedPrecondition,
              "backward through a graph that an earlier backward already ran and freed ({} {}); run the "
              "forward pass again to build a new graph for each backward",
              consumer ? "an input of " + *consumer + "," : "the loss,", v.value.describe());
}

// Topological order of the recorded variables reachable from root (root first), and for
// each variable the number of its uses as an input within that graph. The order holds each
// variable alive until its turn: the node that produced it may be freed before then.
void order_graph(const VariablePtr& root, std::vector<VariablePtr>& order,
                 std::unordered_map<VariableData*, int>& uses) {
  std::vector<std::pair<VariablePtr, size_t>> stack{{root, 0}};
  std::unordered_set<VariableData*> visited{root.get()};
  while (!stack.empty()) {
    auto& [v, next] = stack.back();
    if (v->grad_fn && next < v->grad_fn->inputs.size()) {
      const VariablePtr& in = v->grad_fn->inputs[next++].shared_data();
      if (!in->requires_grad) continue;
      check_not_freed(*in, &v->grad_fn->op);
      ++uses[in.get()];
      if (visited.insert(in.get()).second) stack.push_back({in, 0});
      continue;
    }
    order.push_back(std::move(v));
    stack.pop_back();
  }
  std::reverse(order.begin(), order.end());
}

Tensor accumulate(ExecutionContext& ctx, const Tensor& existing, const Tensor& incoming) {
  if (!existing.defined()) return incoming;
  // Not in place: `existing` may be the very tensor another variable holds as its gradient.
  return backend::add(ctx, existing, incoming);
}

// The sum of two gradients of a variable still inside the graph, written into whichever of the
// two nobody else sees (a residual fork's second gradient, say), so a step allocates no third
// tensor and makes one pass fewer. a + 1 * b rounds as a + b, so the values do not change.
Tensor accumulate_pending(ExecutionContext& ctx, Tensor existing, Tensor incoming) {
  if (!existing.defined()) return incoming;
  if (existing.owns_storage_alone()) {
    backend::axpy(ctx, 1.0f, incoming, existing);
    return existing;
  }
  if (incoming.owns_storage_alone()) {
    backend::axpy(ctx, 1.0f, existing, incoming);
    return incoming;
  }
  return backend::add(ctx, existing, incoming);
}

// The node's gradients; where the node can add its first input's gradient into the sum already
// waiting for that input (nobody else seeing it), it does, and that gradient comes back undefined.
std::vector<Tensor> run_backward(Node& node, const Tensor& dy,
                                 std::unordered_map<VariableData*, Tensor>& pending) {
  if (node.backward_adding && node.inputs[0].requires_grad()) {
    auto it = pending.find(node.inputs[0].data());
    if (it != pending.end() && it->second.defined() && it->second.owns_storage_alone()) {
      return node.backward_adding(dy, it->second);
    }
  }
  return node.backward(dy);
}

// PyTorch's check: an input written in place since its op's forward (an optimizer step, copy_from,
// zero_) would give gradients of values the forward never used.
void check_versions(const Node& node) {
  for (size_t i = 0; i < node.inputs.size() && i < node.input_versions.size(); ++i) {
    const Tensor& value = node.inputs[i].value();
    if (!value.defined() || value.version() == node.input_versions[i]) continue;
    const std::string& name = node.inputs[i].name();
    throw_error(ErrorCode::kFailedPrecondition,
                "backward of op '{}': its input {}{} ({}) was modified in place after the forward pass (version {}, "
                "the forward saw version {}): an optimizer step, copy_from or zero_ ran between this forward and its "
                "backward. Run the forward again after changing the weights",
                node.op, i, name.empty() ? std::string() : " '" + name + "'", value.describe(), value.version(),
                node.input_versions[i]);
  }
}

// The leaves one backward pass accumulates into, claimed for its duration: a second pass through
// the same parameters at the same time (two threads, one module) would race on their gradients.
class LeafClaims {
 public:
  explicit LeafClaims(const std::vector<VariablePtr>& order) {
    claimed_.reserve(order.size());  // so no push_back can throw between a claim and its record
    for (const VariablePtr& v : order) {
      if (v->grad_fn || !v->requires_grad) continue;
      if (v->in_backward.exchange(true, std::memory_order_acq_rel)) {
        release();
        throw_error(ErrorCode::kFailedPrecondition,
                    "backward: another backward pass is running through parameter '{}' ({}) at this moment (a second "
                    "thread using the same module); their gradients would race. Give each thread its own copy of "
                    "the model (as the Trainer's replicas have), or run the backward passes one after another",
                    v->name, v->value.describe());
      }
      claimed_.push_back(v);
    }
  }
  ~LeafClaims() { release(); }
  LeafClaims(const LeafClaims&) = delete;
  LeafClaims& operator=(const LeafClaims&) = delete;

 private:
  void release() {
    for (const VariablePtr& v : claimed_) v->in_backward.store(false, std::memory_order_release);
    claimed_.clear();
  }
  std::vector<VariablePtr> claimed_;
};

}  // namespace

void Variable::backward(ExecutionContext* ctx_in) {
  TANDEM_CHECK(requires_grad(), ErrorCode::kFailedPrecondition,
               "backward on a value that requires no gradient ({}): nothing in its graph is a parameter",
               value().describe());
  TANDEM_CHECK(value().numel() == 1, ErrorCode::kInvalidArgument,
               "backward needs a scalar loss, got {}; reduce it first (sum or mean)", value().describe());
  const VariablePtr& self = root();
  check_not_freed(*self, nullptr);
  std::optional<ExecutionContext> own_ctx;
  if (ctx_in == nullptr) own_ctx.emplace(value().device(), 1);
  ExecutionContext& ctx = ctx_in ? *ctx_in : *own_ctx;

  std::vector<VariablePtr> order;
  std::unordered_map<VariableData*, int> uses;
  order_graph(self, order, uses);
  LeafClaims claims(order);

  Tensor seed = Tensor::empty(value().shape(), DType::kF32, value().device());
  backend::fill(ctx, 1.0f, seed);
  std::unordered_map<VariableData*, Tensor> pending{{self.get(), seed}};
  if (is_leaf()) {
    self->grad = accumulate(ctx, self->grad, seed);
    for (auto& hook : self->grad_ready_hooks) hook(*this);
    return;
  }

  for (VariablePtr& held : order) {
    VariablePtr v = std::move(held);  // released at the end of its turn
    if (!v->grad_fn) continue;  // leaves were finished as their last gradient arrived
    Tensor dy = std::move(pending[v.get()]);
    pending.erase(v.get());
    check_versions(*v->grad_fn);
    std::shared_ptr<Node> node = std::move(v->grad_fn);  // frees the node's saved tensors when done
    v->graph_freed = true;
    std::vector<Tensor> dxs = run_backward(*node, dy, pending);
    TANDEM_CHECK(dxs.size() == node->inputs.size(), ErrorCode::kInvalidArgument,
                 "backward of op '{}' returned {} gradients for its {} inputs; a backward returns one per "
                 "input, in make_op's order (an undefined Tensor for none)",
                 node->op, dxs.size(), node->inputs.size());
    for (size_t i = 0; i < dxs.size(); ++i) {
      Variable& input = node->inputs[i];
      VariableData* in = input.data();
      if (!in->requires_grad) continue;
      if (dxs[i].defined()) {
        TANDEM_CHECK(dxs[i].shape() == in->value.shape(), ErrorCode::kInvalidArgument,
                     "backward of op '{}' returned a gradient of shape {} for input {} of shape {}; each "
                     "gradient has its input's shape",
                     node->op, dxs[i].shape().str(), i, in->value.shape().str());
        Tensor& sum = pending[in];
        sum = accumulate_pending(ctx, std::exchange(sum, Tensor()), std::exchange(dxs[i], Tensor()));
      }
      if (--uses[in] == 0 && !in->grad_fn) {
        // The last use of this leaf has sent its part: its gradient for this pass is final.
        if (pending[in].defined()) in->grad = accumulate(ctx, in->grad, pending[in]);
        pending.erase(in);
        for (auto& hook : in->grad_ready_hooks) hook(input);
      }
    }
  }
}

}  // namespace tandem::autograd
