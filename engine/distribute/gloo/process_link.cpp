// ProcessLink on Gloo: a TCP device on the interface that routes toward process 0, and one
// gloo::rendezvous::Context per channel, all bootstrapped through Tandem's rendezvous store.
#include "engine/distribute/process_link.h"

#include "engine/distribute/bf16_wire.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <spdlog/spdlog.h>

#include <thread>

#include "engine/core/error.h"
#include "engine/distribute/bootstrap/client.h"

namespace tandem::distribute {
namespace {

// Gloo's store interface over the rendezvous client.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(bootstrap::Client& client) : client_(client) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    client_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = client_.get(key);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys) client_.get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait(keys); }

 private:
  bootstrap::Client& client_;
};

}  // namespace

struct ProcessLink::Impl {
  ProcessLinkOptions options;
  std::unique_ptr<bootstrap::Client> client;
  std::shared_ptr<gloo::transport::Device> device;
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts;

  std::shared_ptr<gloo::Context> shared(int channel) {
    TANDEM_CHECK(channel >= 0 && channel < static_cast<int>(contexts.size()), ErrorCode::kOutOfRange,
                 "process link channel {} of {}", channel, contexts.size());
    return contexts[static_cast<size_t>(channel)];
  }
  // Runs a Gloo collective, turning its exceptions into Errors that say which process failed.
  template <typename F>
  void run(const char* what, F&& f, ProcessLink& link) {
    try {
      f();
    } catch (const gloo::Exception& e) {
      throw Error(ErrorCode::kUnavailable,
                  fmt::format("{} across processes failed on process {}: {}; {}", what, options.spec.rank, e.what(),
                              link.diagnose()));
    }
  }
};

ProcessLink::ProcessLink(const ProcessLinkOptions& o) : impl_(std::make_unique<Impl>()) {
  impl_->options = o;
  bootstrap::JoinOptions join{.address = o.spec.address, .port = o.spec.port, .rank = o.spec.rank,
                              .size = o.spec.size, .local_replicas = o.local_replicas, .identity = o.identity,
                              .token = o.spec.token, .timeout = o.timeout};
  impl_->client = std::make_unique<bootstrap::Client>(join);
  gloo::transport::tcp::attr attr;
  attr.hostname = bootstrap::local_address_toward(o.spec.address, o.spec.port);
  try {
    impl_->device = gloo::transport::tcp::CreateDevice(attr);
    StoreAdapter store(*impl_->client);
    for (int c = 0; c < o.local_replicas; ++c) {
      gloo::rendezvous::PrefixStore prefixed("channel-" + std::to_string(c), store);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(o.spec.rank, o.spec.size);
      ctx->setTimeout(o.timeout);
      ctx->connectFullMesh(prefixed, impl_->device);
      impl_->contexts.push_back(std::move(ctx));
    }
  } catch (const gloo::Exception& e) {
    throw Error(ErrorCode::kUnavailable, fmt::format("connecting the {} processes over Gloo (this one on {}) failed: "
                                                     "{}; {}",
                                                     o.spec.size, attr.hostname, e.what(), diagnose()));
  }
}

ProcessLink::~ProcessLink() = default;

bool ProcessLink::available() { return true; }
int ProcessLink::rank() const { return impl_->options.spec.rank; }
int ProcessLink::size() const { return impl_->options.spec.size; }
int ProcessLink::local_replicas() const { return impl_->options.local_replicas; }
const std::vector<std::string>& ProcessLink::hosts() const { return impl_->client->hosts(); }
bootstrap::Client& ProcessLink::rendezvous() { return *impl_->client; }

void ProcessLink::all_reduce_sum(int channel, float* data, int64_t count) {
  if (count == 0) return;
  impl_->run("all_reduce", [&] {
    gloo::AllreduceOptions opts(impl_->shared(channel));
    opts.setOutput(data, static_cast<size_t>(count));
    opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) { gloo::sum<float>(c, a, b, n); });
    opts.setTimeout(impl_->options.timeout);
    gloo::allreduce(opts);
  }, *this);
}

void ProcessLink::all_reduce_sum_bf16(int channel, uint16_t* data, int64_t count) {
  if (count == 0) return;
  impl_->run("all_reduce (bf16)", [&] {
    gloo::AllreduceOptions opts(impl_->shared(channel));
    opts.setOutput(data, static_cast<size_t>(count));
    opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
      auto* out = static_cast<uint16_t*>(c);
      const auto* x = static_cast<const uint16_t*>(a);
      const auto* y = static_cast<const uint16_t*>(b);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_wire::round(bf16_wire::widen(x[i]) + bf16_wire::widen(y[i]));
    });
    opts.setTimeout(impl_->options.timeout);
    gloo::allreduce(opts);
  }, *this);
}

void ProcessLink::all_gather(int channel, const void* in, void* out, size_t bytes) {
  if (bytes == 0) return;
  impl_->run("all_gather", [&] {
    gloo::AllgatherOptions opts(impl_->shared(channel));
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
    opts.setOutput(static_cast<uint8_t*>(out), bytes * static_cast<size_t>(size()));
    opts.setTimeout(impl_->options.timeout);
    gloo::allgather(opts);
  }, *this);
}

void ProcessLink::broadcast(int channel, void* data, size_t bytes, int root) {
  if (bytes == 0) return;
  impl_->run("broadcast", [&] {
    gloo::BroadcastOptions opts(impl_->shared(channel));
    opts.setOutput(static_cast<uint8_t*>(data), bytes);
    opts.setRoot(root);
    opts.setTimeout(impl_->options.timeout);
    gloo::broadcast(opts);
  }, *this);
}

void ProcessLink::barrier(int channel) {
  impl_->run("barrier", [&] {
    gloo::BarrierOptions opts(impl_->shared(channel));
    opts.setTimeout(impl_->options.timeout);
    gloo::barrier(opts);
  }, *this);
}

std::string ProcessLink::diagnose() {
  bootstrap::Client& c = *impl_->client;
  // A killed process's connections drop together, but the rendezvous may see it a moment after
  // Gloo did; a process that gave up waiting says so. Whoever does neither within a grace period
  // never came to the collective (stopped, hung, or slower than the watchdog allows).
  c.set(fmt::format("timed-out/{}", rank()), "");
  const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::vector<std::string> stalled;
  for (;;) {
    if (std::string gone = c.departed(); !gone.empty()) return "gone: " + gone;
    stalled.clear();
    for (int p = 0; p < size(); ++p) {
      if (p != rank() && !c.has(fmt::format("timed-out/{}", p))) stalled.push_back(c.who(p));
    }
    if (stalled.empty() || std::chrono::steady_clock::now() >= grace) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double limit = impl_->options.timeout.count() / 1000.0;
  if (stalled.empty()) {
    return fmt::format("every process gave up waiting (distribute.watchdog_timeout_s {} s): the processes are in "
                       "different collectives, or the network between them is down",
                       limit);
  }
  return fmt::format("stalled: {} did not reach it within distribute.watchdog_timeout_s ({} s): stopped, hung, or "
                     "slower than the watchdog allows",
                     fmt::join(stalled, ", "), limit);
}

void ProcessLink::goodbye() noexcept {
  if (impl_ && impl_->client) impl_->client->goodbye();
}

void ProcessLink::report_failure(const std::string& reason) noexcept {
  if (impl_ && impl_->client) impl_->client->report_failure(reason);
}

}  // namespace tandem::distribute
