// Tensor: a shape, a dtype, a device and a memory format over contiguous storage that is
// shared by reference. The shape is always logical (N, C, H, W for images); the memory
// format says how it lies in memory (NCHW or NHWC). Copies between devices are explicit.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/shape.h"

namespace tandem {

class CachingAllocator;
class Tensor;

enum class MemoryFormat : uint8_t {
  kContiguous,  // row-major in the order of the shape (NCHW for 4-D)
  kChannelsLast,  // 4-D only: physical order N, H, W, C
};

std::string_view memory_format_name(MemoryFormat format);

// Device memory owned through the device's caching allocator, or borrowed from outside.
class Storage {
 public:
  Storage(CachingAllocator& allocator, size_t bytes);
  Storage(void* external, size_t bytes, Device device);  // borrowed: never freed by us
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool borrowed() const { return allocator_ == nullptr; }
  Device device() const { return device_; }
  // Work queued on `stream` uses this memory too: its reuse after free waits for that work.
  void record_stream(Stream& stream);
  // Counts in-place writes (Tensor::bump_version), as PyTorch's version counter does.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  // The bf16 shadow (Tensor::bf16_shadow): a rounded copy of these f32 values, and the version it
  // was rounded at. Used by the thread that owns the tensor (a replica's parameters), unlocked.
  const Tensor* bf16_shadow() const { return shadow_.get(); }
  uint64_t bf16_shadow_version() const { return shadow_version_; }
  void set_bf16_shadow(const Tensor& shadow, uint64_t version);

 private:
  std::atomic<uint64_t> version_{0};
  std::unique_ptr<Tensor> shadow_;
  uint64_t shadow_version_ = 0;
  CachingAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds no storage

  static Tensor empty(const Shape& shape, DType dtype = DType::kF32, Device device = Device::cpu(),
                      MemoryFormat format = MemoryFormat::kContiguous);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kF32, Device device = Device::cpu(),
                      MemoryFormat format = MemoryFormat::kContiguous);
  // A CPU f32 tensor holding a copy of values; values.size() must equal shape.numel().
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  // Wraps memory owned by someone else (a pinned buffer, a mapped file); it must outlive the tensor.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device,
                       MemoryFormat format = MemoryFormat::kContiguous);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const;
  MemoryFormat format() const { return format_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw_data() const;
  template <typename T>
  T* data() const {
    TANDEM_CHECK(DTypeOf<T>::value == dtype_, ErrorCode::kInvalidArgument,
                 "tensor {} accessed as {}", describe(), dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(raw_data());
  }

  // Explicit copies. `to` returns this tensor when it already is on the device. With a stream the
  // copy is queued there (asynchronous where the device allows). Without one it is ordered after the
  // work of the calling thread's current stream (the replica's, see ExecutionContext::bind), or
  // after all of the device's work when the thread has none; it is complete on return, except a
  // copy within the device on the current stream, which later work on that stream follows.
  Tensor to(Device device, Stream* stream = nullptr) const;
  Tensor clone() const;
  void copy_from(const Tensor& src, Stream* stream = nullptr);
  // This tensor's memory is used by work queued on `stream` besides its own (see CachingAllocator).
  void record_stream(Stream& stream) const;
  // The same storage seen with another shape of the same element count (contiguous only).
  Tensor reshape(const Shape& shape) const;
  // The same storage seen as another logical shape and memory format with the same element count:
  // a contiguous (N, H, W, C) buffer is the channels_last layout of logical (N, C, H, W).
  Tensor view(const Shape& shape, MemoryFormat format) const;
  // The same values laid out in another memory format: a copy, except where both layouts are the
  // same bytes (one channel, or a 1x1 plane), where it is a view of this storage, as PyTorch's
  // contiguous(memory_format) returns self. A real conversion on a device goes through the host,
  // synchronously: for setup and checkpoints, not for a training step.
  Tensor to_format(MemoryFormat format) const;
  // Fills with zeros on any device, ordered as a copy without a stream is.
  void zero_();
  // CPU f32 values as a vector, in logical (NCHW) order whatever the memory format.
  std::vector<float> to_vector() const;

  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }
  // The storage's count of in-place writes: copy_from, zero_ and optimizer updates bump it, and the
  // autograd tape compares it with what an op saw in its forward. 0 for an undefined tensor.
  uint64_t version() const { return storage_ ? storage_->version() : 0; }
  void bump_version() const {
    if (storage_) storage_->bump_version();
  }
  // The bf16 shadow of an f32 weight: its copy rounded to bf16, kept with the storage so that the
  // products of precision: bf16 read it rather than round the weight on every call. The forward
  // makes it (backend::bf16_weight) and the optimizer rewrites it in its update kernel. It is
  // current while the storage's version is the one it was rounded at: copy_from, zero_, fill, an
  // optimizer step or a broadcast move the version on, and the next bf16_weight rounds again.
  // (Writes through data<T>() bypass the count, as writes to PyTorch's .data do: call bump_version.)
  // Undefined when none was attached.
  Tensor bf16_shadow() const;
  bool bf16_shadow_current() const;
  // Attaches `shadow` (bf16, this tensor's shape and format) as rounded from the present values.
  void set_bf16_shadow(const Tensor& shadow) const;
  // No other tensor (no view, no copy of this handle) sees this memory, and it is ours, not
  // borrowed: writing into it in place cannot change a value anybody else holds.
  bool owns_storage_alone() const;
  std::string describe() const;  // "f32[2, 3] cpu"

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  DType dtype_ = DType::kF32;
  MemoryFormat format_ = MemoryFormat::kContiguous;
};

}  // namespace tandem
