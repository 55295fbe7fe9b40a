// Devices and the small set of services each kind of device provides: raw memory,
// copies, streams and events. Kernels live elsewhere (engine/backend).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace tandem {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index) { return {DeviceType::kCuda, index}; }
  static Device parse(std::string_view text);  // "cpu", "cuda", "cuda:1"
  bool is_cpu() const { return type == DeviceType::kCpu; }
  std::string str() const;  // "cpu", "cuda:1"
  friend bool operator==(const Device&, const Device&) = default;
};

std::string_view device_type_name(DeviceType type);

// An ordered queue of device work. On the CPU work runs at once and the stream is a no-op.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  virtual void synchronize() = 0;
  virtual void* native_handle() = 0;  // cudaStream_t on CUDA, nullptr on the CPU
};

// A marker in a stream that another stream or the host can wait for.
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;
  virtual void wait(Stream& stream) = 0;  // stream waits for this event, host does not block
  virtual void synchronize() = 0;         // host blocks until the event has happened
  virtual bool query() = 0;               // true once the event has happened
  // Seconds from `earlier`'s record to this one's, both having happened; only events made by
  // DeviceServices::create_timer_event measure time (others throw Unimplemented).
  virtual double seconds_since(Event& earlier);
};

class DeviceServices {
 public:
  virtual ~DeviceServices() = default;
  virtual DeviceType type() const = 0;
  virtual int device_count() const = 0;
  // System-level allocation; the caching allocator sits on top and calls these rarely.
  virtual void* raw_allocate(int device, size_t bytes) = 0;
  virtual void raw_free(int device, void* ptr, size_t bytes) noexcept = 0;
  // Copies between this device and the host or within this device. With a stream the copy
  // is ordered on it (and asynchronous on devices that allow it). Without one, a copy within the
  // thread's device is queued on the thread's current stream (current_stream()) and returns at
  // once; any other copy (to or from the host, between devices, or with no current stream) is
  // complete when the call returns.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                    Stream* stream) = 0;
  virtual std::unique_ptr<Stream> create_stream(int device) = 0;
  virtual std::unique_ptr<Event> create_event(int device) = 0;
  // An event that also measures time (CUDA: without cudaEventDisableTiming; a little dearer).
  virtual std::unique_ptr<Event> create_timer_event(int device) { return create_event(device); }
  virtual void synchronize(int device) = 0;
  // Host memory that asynchronous copies to and from this kind of device may use without a
  // bounce buffer: page-locked on CUDA (the copy engine reads it directly, so the copy really
  // overlaps compute), plain aligned memory on the CPU. Costly to allocate: keep and reuse it.
  virtual void* allocate_host_pinned(size_t bytes) = 0;
  virtual void free_host_pinned(void* ptr, size_t bytes) noexcept = 0;
  // Sets `bytes` of device memory to zero, ordered on `stream` like copy(); without one, queued on
  // the thread's current stream (no wait), or synchronous when the thread has none.
  virtual void fill_zero(void* dst, Device device, size_t bytes, Stream* stream) = 0;
  // Makes `device` the calling thread's current device (cudaSetDevice); a no-op on the CPU.
  virtual void bind_thread(int device) = 0;
};

// The stream a thread's implicit device work goes to: ExecutionContext::bind() sets it for a replica
// thread, so a copy or fill called without a stream (Tensor::to, zero_, reading a value back) is
// ordered after the replica's kernels instead of racing them on another stream. Null when unbound.
Stream* current_stream();
// Sets the calling thread's current stream (null unbinds); returns the previous one.
Stream* set_current_stream(Stream* stream);

// Makes `stream` the calling thread's current stream for a scope, then restores the previous one.
class StreamScope {
 public:
  explicit StreamScope(Stream* stream) : previous_(set_current_stream(stream)) {}
  ~StreamScope() { set_current_stream(previous_); }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  Stream* previous_;
};

// The CPU's services are always there; others are registered by engine/backend at start.
DeviceServices& cpu_device_services();
void register_device_services(std::shared_ptr<DeviceServices> services);
bool has_device_services(DeviceType type);
// Throws Unavailable, naming the device type, when no such services were registered.
DeviceServices& device_services(DeviceType type);

}  // namespace tandem
