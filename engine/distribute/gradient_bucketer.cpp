// The bucketed reducer: hooks copy each final gradient into its bucket's flat buffer and launch
// buckets strictly in bucket order (a later bucket that is ready first waits for the earlier
// ones), so every replica issues the same collectives in the same order.
#include "engine/distribute/gradient_bucketer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/backend/ops.h"

namespace tandem::distribute {

std::vector<Bucket> plan_buckets(const std::vector<int64_t>& param_numel, const BucketOptions& options) {
  TANDEM_CHECK(options.first_bucket_bytes > 0 && options.bucket_bytes > 0, ErrorCode::kInvalidArgument,
               "bucket sizes must be positive (first {} B, then {} B)", options.first_bucket_bytes,
               options.bucket_bytes);
  std::vector<Bucket> buckets;
  Bucket current;
  for (int i = static_cast<int>(param_numel.size()) - 1; i >= 0; --i) {
    current.params.push_back(i);
    current.offsets.push_back(current.numel);
    current.numel += param_numel[static_cast<size_t>(i)];
    size_t limit = buckets.empty() ? options.first_bucket_bytes : options.bucket_bytes;
    if (static_cast<size_t>(current.numel) * sizeof(float) >= limit) {
      buckets.push_back(std::move(current));
      current = Bucket();
    }
  }
  if (!current.params.empty()) buckets.push_back(std::move(current));
  return buckets;
}

struct GradientBucketer::State {
  Communicator* comm;
  ExecutionContext* ctx;
  BucketOptions options;
  std::vector<std::string> names;
  std::vector<autograd::Variable> params;
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of, slot_of;  // per parameter: its bucket and its position there
  std::vector<Tensor> flat;             // per bucket: the flat buffer all-reduced in place
  std::vector<Tensor> wire;             // per bucket: its bf16 copy, all-reduced instead (wire_dtype bf16)
  std::vector<Tensor> reduced;          // per parameter: its reduced gradient, handed to the optimizer
  std::vector<CollectiveHandle> handles;
  // Per step:
  std::vector<char> ready, had_grad;
  std::vector<int> pending;  // per bucket: gradients still to come
  size_t next_launch = 0;
  bool reducing = true;
  std::vector<char> warned;  // per parameter: its missing gradient was reported

  void copy(void* dst, const void* src, size_t bytes) {
    Device d = ctx->device();
    Stream* stream = d.is_cpu() ? nullptr : &ctx->stream();
    device_services(d.type).copy(dst, d, src, d, bytes, stream);
  }
  float* slot_ptr(int param) {
    const Bucket& b = buckets[static_cast<size_t>(bucket_of[static_cast<size_t>(param)])];
    return static_cast<float*>(flat[static_cast<size_t>(bucket_of[static_cast<size_t>(param)])].raw_data()) +
           b.offsets[static_cast<size_t>(slot_of[static_cast<size_t>(param)])];
  }

  void on_grad_ready(int i, autograd::Variable& v);
  // Zeros for each parameter without a gradient this step, and the launches they unblock.
  void fill_missing();
  void launch_in_order();
  void rearm();
};

void GradientBucketer::State::on_grad_ready(int i, autograd::Variable& v) {
  if (!reducing) return;  // accumulating: the last backward of the step reduces the sum
  auto idx = static_cast<size_t>(i);
  TANDEM_CHECK(!ready[idx], ErrorCode::kFailedPrecondition,
               "parameter {} got a second gradient before GradientBucketer::finish(): call finish() after "
               "each backward (gradient accumulation over several backwards is not supported here)",
               names[idx]);
  ready[idx] = 1;
  if (v.has_grad()) {
    const Tensor& g = v.grad();
    TANDEM_CHECK(g.dtype() == DType::kF32 && g.numel() == params[idx].value().numel(), ErrorCode::kInternal,
                 "gradient of {} is {}, expected f32 like {}", names[idx], g.describe(),
                 params[idx].value().describe());
    had_grad[idx] = 1;
    copy(slot_ptr(i), g.raw_data(), g.nbytes());
  }
  --pending[static_cast<size_t>(bucket_of[idx])];
  launch_in_order();
}

void GradientBucketer::State::fill_missing() {
  std::string named;
  for (size_t i = 0; i < params.size(); ++i) {
    if (had_grad[i]) continue;
    const Device d = ctx->device();
    device_services(d.type).fill_zero(slot_ptr(static_cast<int>(i)), d, params[i].value().nbytes(),
                                      d.is_cpu() ? nullptr : &ctx->stream());
    if (!warned[i]) named += fmt::format("{}{}", named.empty() ? "" : ", ", names[i]);
    warned[i] = 1;
    if (!ready[i]) {
      ready[i] = 1;
      --pending[static_cast<size_t>(bucket_of[i])];
    }
  }
  if (!named.empty()) {
    spdlog::warn("replica {}: no gradient at step {} for {}: zeros are all-reduced for it (said once per "
                 "parameter; freeze a parameter that is meant to be unused with requires_grad false)",
                 comm->rank(), comm->step(), named);
  }
  launch_in_order();
}

void GradientBucketer::State::launch_in_order() {
  while (next_launch < buckets.size() && pending[next_launch] == 0) {
    CollectiveTag tag{.bucket = static_cast<int>(next_launch), .after = ctx->device().is_cpu() ? nullptr : &ctx->stream()};
    const Tensor& f = flat[next_launch];
    if (wire.empty()) {
      handles[next_launch] = comm->all_reduce_async(f, options.op, tag);
    } else {
      Tensor& w = wire[next_launch];
      backend::round_to_bf16(*ctx, f, w);  // on the replica's stream, which the collective follows
      handles[next_launch] = comm->all_reduce_async(w, options.op, tag);
    }
    ++next_launch;
  }
}

void GradientBucketer::State::rearm() {
  std::fill(ready.begin(), ready.end(), 0);
  std::fill(had_grad.begin(), had_grad.end(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) pending[b] = static_cast<int>(buckets[b].params.size());
  next_launch = 0;
}

GradientBucketer::GradientBucketer(Communicator& comm, ExecutionContext& ctx,
                                   std::vector<std::pair<std::string, autograd::Variable>> parameters,
                                   BucketOptions options)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.comm = &comm;
  s.ctx = &ctx;
  s.options = options;
  TANDEM_CHECK(options.wire_dtype == DType::kF32 || options.wire_dtype == DType::kBF16, ErrorCode::kInvalidArgument,
               "gradients are all-reduced in f32 or in bf16; got {}", dtype_name(options.wire_dtype));
  std::vector<int64_t> numel;
  for (auto& [name, v] : parameters) {
    TANDEM_CHECK(v.requires_grad() && v.value().dtype() == DType::kF32 && v.value().device() == ctx.device(),
                 ErrorCode::kInvalidArgument,
                 "GradientBucketer takes trainable f32 parameters on {}; {} is {}{}", ctx.device().str(), name,
                 v.value().describe(), v.requires_grad() ? "" : " and requires no gradient");
    s.names.push_back(name);
    s.params.push_back(v);
    numel.push_back(v.value().numel());
  }
  s.buckets = plan_buckets(numel, options);
  s.bucket_of.resize(s.params.size());
  s.slot_of.resize(s.params.size());
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    for (size_t k = 0; k < s.buckets[b].params.size(); ++k) {
      s.bucket_of[static_cast<size_t>(s.buckets[b].params[k])] = static_cast<int>(b);
      s.slot_of[static_cast<size_t>(s.buckets[b].params[k])] = static_cast<int>(k);
    }
    s.flat.push_back(Tensor::zeros({s.buckets[b].numel}, DType::kF32, ctx.device()));
    if (options.wire_dtype == DType::kBF16) {
      s.wire.push_back(Tensor::zeros({s.buckets[b].numel}, DType::kBF16, ctx.device()));
    }
  }
  for (auto& v : s.params) s.reduced.push_back(Tensor::zeros(v.value().shape(), DType::kF32, ctx.device()));
  s.handles.resize(s.buckets.size());
  s.warned.resize(s.params.size());
  s.ready.resize(s.params.size());
  s.had_grad.resize(s.params.size());
  s.pending.resize(s.buckets.size());
  s.rearm();
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i].register_grad_ready_hook([weak, i](autograd::Variable& v) {
      if (auto state = weak.lock()) state->on_grad_ready(static_cast<int>(i), v);
    });
  }
}

GradientBucketer::~GradientBucketer() {
  // Launched buckets still read and write our buffers: let them finish (errors were or will be
  // reported by finish(); a destructor must not throw).
  for (size_t b = 0; b < state_->next_launch; ++b) {
    try {
      state_->handles[b].wait();
    } catch (...) {
    }
  }
}

const std::vector<Bucket>& GradientBucketer::buckets() const { return state_->buckets; }
const std::string& GradientBucketer::parameter_name(int index) const {
  return state_->names.at(static_cast<size_t>(index));
}

void GradientBucketer::finish(const std::function<void(const std::vector<int>&)>& on_bucket,
                              const std::function<void(bool)>& on_wait) {
  State& s = *state_;
  try {
    s.fill_missing();
    for (size_t b = 0; b < s.buckets.size(); ++b) {
      // On a GPU the replica's stream waits for the bucket and the host goes on queueing the update.
      if (on_wait) on_wait(true);
      if (s.ctx->device().is_cpu()) {
        s.handles[b].wait();
      } else {
        s.handles[b].wait_on(s.ctx->stream());
      }
      if (on_wait) on_wait(false);
      if (!s.wire.empty()) backend::widen_from_bf16(*s.ctx, s.wire[b], s.flat[b]);
      for (int p : s.buckets[b].params) {
        auto i = static_cast<size_t>(p);
        s.copy(s.reduced[i].raw_data(), s.slot_ptr(p), s.reduced[i].nbytes());
        s.params[i].set_grad(s.reduced[i]);
      }
      if (on_bucket) on_bucket(s.buckets[b].params);
    }
  } catch (...) {
    reset();
    throw;
  }
  s.rearm();
}

void GradientBucketer::set_reducing(bool on) { state_->reducing = on; }

void GradientBucketer::reset() {
  State& s = *state_;
  for (size_t b = 0; b < s.next_launch; ++b) {
    try {
      s.handles[b].wait();  // the buffers are in use until then
    } catch (...) {
      // The group has failed; the caller is already handling that failure.
    }
  }
  s.rearm();
}

}  // namespace tandem::distribute
