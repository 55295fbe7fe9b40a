#include "engine/core/device.h"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "engine/core/error.h"

namespace tandem {
namespace {

class CpuStream final : public Stream {
 public:
  Device device() const override { return Device::cpu(); }
  void synchronize() override {}
  void* native_handle() override { return nullptr; }
};

// CPU work runs at once, so an event has happened when it is recorded, and its time is the host's.
class CpuEvent final : public Event {
 public:
  void record(Stream&) override { at_ = std::chrono::steady_clock::now(); }
  void wait(Stream&) override {}
  void synchronize() override {}
  bool query() override { return true; }
  double seconds_since(Event& earlier) override {
    auto* e = dynamic_cast<CpuEvent*>(&earlier);
    TANDEM_CHECK(e != nullptr, ErrorCode::kInvalidArgument, "seconds_since: a CPU event against another kind");
    return std::chrono::duration<double>(at_ - e->at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_{};
};

class CpuDeviceServices final : public DeviceServices {
 public:
  static constexpr size_t kAlignment = 64;  // a cache line, and oneDNN's preferred alignment

  DeviceType type() const override { return DeviceType::kCpu; }
  int device_count() const override { return 1; }
  void* raw_allocate(int, size_t bytes) override { return aligned(bytes); }
  void raw_free(int, void* ptr, size_t) noexcept override { std::free(ptr); }
  // The CPU copies with memcpy: any host memory will do, so "pinned" is plain aligned memory.
  void* allocate_host_pinned(size_t bytes) override { return aligned(bytes); }
  void free_host_pinned(void* ptr, size_t) noexcept override { std::free(ptr); }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream*) override {
    TANDEM_CHECK(dst_device.is_cpu() && src_device.is_cpu(), ErrorCode::kInvalidArgument,
                 "cpu services cannot copy from {} to {}", src_device.str(), dst_device.str());
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* dst, Device device, size_t bytes, Stream*) override {
    TANDEM_CHECK(device.is_cpu(), ErrorCode::kInvalidArgument, "cpu services cannot fill memory on {}",
                 device.str());
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
  void bind_thread(int) override {}
  std::unique_ptr<Stream> create_stream(int) override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Event> create_event(int) override { return std::make_unique<CpuEvent>(); }
  void synchronize(int) override {}

 private:
  static void* aligned(size_t bytes) {
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    TANDEM_CHECK(ptr != nullptr, ErrorCode::kResourceExhausted, "cpu: out of memory allocating {} bytes",
                 bytes);
    return ptr;
  }
};

std::mutex registry_mutex;
std::shared_ptr<DeviceServices> cuda_services;
thread_local Stream* thread_stream = nullptr;

}  // namespace

double Event::seconds_since(Event&) {
  throw_error(ErrorCode::kUnimplemented, "seconds_since: this event does not measure time (make it with create_timer_event)");
}

Stream* current_stream() { return thread_stream; }

Stream* set_current_stream(Stream* stream) {
  Stream* previous = thread_stream;
  thread_stream = stream;
  return previous;
}

std::string_view device_type_name(DeviceType type) { return type == DeviceType::kCpu ? "cpu" : "cuda"; }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  throw_error(ErrorCode::kInvalidArgument, "cannot parse device '{}': expected cpu, cuda or cuda:N", text);
}

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

DeviceServices& cpu_device_services() {
  static CpuDeviceServices services;
  return services;
}

void register_device_services(std::shared_ptr<DeviceServices> services) {
  TANDEM_CHECK(services && services->type() == DeviceType::kCuda, ErrorCode::kInvalidArgument,
               "only CUDA device services can be registered; the CPU's are built in");
  std::lock_guard lock(registry_mutex);
  cuda_services = std::move(services);
}

bool has_device_services(DeviceType type) {
  if (type == DeviceType::kCpu) return true;
  std::lock_guard lock(registry_mutex);
  return cuda_services != nullptr;
}

DeviceServices& device_services(DeviceType type) {
  if (type == DeviceType::kCpu) return cpu_device_services();
  std::lock_guard lock(registry_mutex);
  TANDEM_CHECK(cuda_services != nullptr, ErrorCode::kUnavailable,
               "no CUDA device services: the CUDA backend plugin is not loaded (run `trainer doctor` to see why)");
  return *cuda_services;
}

}  // namespace tandem
