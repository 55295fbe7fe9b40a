#include "engine/core/tensor.h"

#include <cstring>

#include "engine/core/allocator.h"

namespace tandem {

std::string_view memory_format_name(MemoryFormat format) {
  return format == MemoryFormat::kContiguous ? "contiguous" : "channels_last";
}

Storage::Storage(CachingAllocator& allocator, size_t bytes)
    : allocator_(&allocator), data_(allocator.allocate(bytes)), bytes_(bytes), device_(allocator.device()) {}

Storage::Storage(void* external, size_t bytes, Device device) : data_(external), bytes_(bytes), device_(device) {}

void Storage::record_stream(Stream& stream) {
  if (allocator_ != nullptr) allocator_->record_stream(data_, stream);
}

void Storage::set_bf16_shadow(const Tensor& shadow, uint64_t version) {
  if (!shadow_) shadow_ = std::make_unique<Tensor>();
  *shadow_ = shadow;
  shadow_version_ = version;
}

Storage::~Storage() {
  if (allocator_ != nullptr) allocator_->deallocate(data_, bytes_);
}

namespace {

void check_format(const Shape& shape, MemoryFormat format) {
  TANDEM_CHECK(format == MemoryFormat::kContiguous || shape.rank() == 4, ErrorCode::kInvalidArgument,
               "channels_last needs a 4-D shape (N, C, H, W), got {}", shape.str());
}

// Index into NHWC storage of the element at logical (n, c, h, w).
size_t nhwc_index(const Shape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return static_cast<size_t>(((n * s[2] + h) * s[3] + w) * s[1] + c);
}

}  // namespace

Tensor Tensor::bf16_shadow() const {
  const Tensor* shadow = storage_ ? storage_->bf16_shadow() : nullptr;
  return shadow != nullptr ? *shadow : Tensor();
}

bool Tensor::bf16_shadow_current() const {
  return storage_ && storage_->bf16_shadow() != nullptr && storage_->bf16_shadow_version() == storage_->version();
}

void Tensor::set_bf16_shadow(const Tensor& shadow) const {
  TANDEM_CHECK(defined() && dtype_ == DType::kF32 && shadow.defined() && shadow.dtype() == DType::kBF16 &&
                   shadow.shape() == shape_ && shadow.format() == format_ && shadow.device() == device() &&
                   !shadow.shares_storage_with(*this),
               ErrorCode::kInvalidArgument, "set_bf16_shadow: {} cannot shadow {} (bf16, same shape, format and device)",
               shadow.defined() ? shadow.describe() : std::string("undefined"),
               defined() ? describe() : std::string("undefined"));
  storage_->set_bf16_shadow(shadow, storage_->version());
}

bool Tensor::owns_storage_alone() const {
  return storage_ != nullptr && storage_.use_count() == 1 && !storage_->borrowed();
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  check_format(shape, format);
  // 2^56 bytes is past any machine's memory, and far from size_t's end, so nbytes() cannot wrap.
  constexpr int64_t kMaxBytes = int64_t{1} << 56;
  TANDEM_CHECK(shape.numel() <= kMaxBytes / static_cast<int64_t>(dtype_size(dtype)), ErrorCode::kResourceExhausted,
               "a tensor of shape {} and type {} needs {} elements of {} bytes, more memory than any machine has: "
               "check the sizes that made it (a model key such as hidden, num_classes or n_embd?)",
               shape.str(), dtype_name(dtype), shape.numel(), dtype_size(dtype));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.format_ = format;
  t.storage_ = std::make_shared<Storage>(allocator_for(device), t.nbytes());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  Tensor t = empty(shape, dtype, device, format);
  t.zero_();
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  TANDEM_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), ErrorCode::kInvalidArgument,
               "from_vector: {} values do not fill shape {} ({} elements)", values.size(), shape.str(),
               shape.numel());
  Tensor t = empty(shape);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  check_format(shape, format);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.format_ = format;
  t.storage_ = std::make_shared<Storage>(data, t.nbytes(), device);
  return t;
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

void* Tensor::raw_data() const {
  TANDEM_CHECK(defined(), ErrorCode::kFailedPrecondition, "access to the data of an undefined tensor");
  return storage_->data();
}

Tensor Tensor::to(Device device, Stream* stream) const {
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, dtype_, device, format_);
  out.copy_from(*this, stream);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device(), format_);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src, Stream* stream) {
  TANDEM_CHECK(defined() && src.defined(), ErrorCode::kInvalidArgument, "copy_from: undefined tensor");
  TANDEM_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_ && format_ == src.format_,
               ErrorCode::kInvalidArgument, "copy_from: destination {} {} and source {} {} differ",
               describe(), memory_format_name(format_), src.describe(), memory_format_name(src.format_));
  // A copy that touches a CUDA device goes through the CUDA services, host-to-host through the CPU's.
  DeviceType type = device().is_cpu() ? src.device().type : device().type;
  device_services(type).copy(raw_data(), device(), src.raw_data(), src.device(), nbytes(), stream);
  bump_version();
}

void Tensor::record_stream(Stream& stream) const {
  TANDEM_CHECK(defined(), ErrorCode::kFailedPrecondition, "record_stream on an undefined tensor");
  storage_->record_stream(stream);
}

Tensor Tensor::reshape(const Shape& shape) const {
  TANDEM_CHECK(shape.numel() == numel(), ErrorCode::kInvalidArgument,
               "reshape: cannot view {} ({} elements) as {} ({} elements)", describe(), numel(), shape.str(),
               shape.numel());
  TANDEM_CHECK(format_ == MemoryFormat::kContiguous, ErrorCode::kInvalidArgument,
               "reshape: {} is channels_last; convert with to_format first", describe());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::view(const Shape& shape, MemoryFormat format) const {
  TANDEM_CHECK(shape.numel() == numel(), ErrorCode::kInvalidArgument, "view: cannot see {} ({} elements) as {} ({})",
               describe(), numel(), shape.str(), shape.numel());
  check_format(shape, format);
  Tensor t = *this;
  t.shape_ = shape;
  t.format_ = format;
  return t;
}

Tensor Tensor::to_format(MemoryFormat format) const {
  if (format == format_) return *this;
  // With one channel, or a 1x1 plane, NCHW and NHWC are the same bytes: no copy (this is the
  // flatten after global average pooling, every step).
  if (rank() == 4 && (shape_[1] == 1 || shape_[2] * shape_[3] == 1)) return view(shape_, format);
  if (!device().is_cpu()) return to(Device::cpu()).to_format(format).to(device());
  Tensor out = empty(shape_, dtype_, device(), format);
  const Shape& s = shape_;
  size_t esize = dtype_size(dtype_);
  auto* src = static_cast<const uint8_t*>(raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  size_t i = 0;  // index in NCHW order
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w, ++i) {
          size_t j = nhwc_index(s, n, c, h, w);
          if (format == MemoryFormat::kChannelsLast) {
            std::memcpy(dst + j * esize, src + i * esize, esize);
          } else {
            std::memcpy(dst + i * esize, src + j * esize, esize);
          }
        }
  return out;
}

void Tensor::zero_() {
  bump_version();
  if (device().is_cpu()) {
    std::memset(raw_data(), 0, nbytes());
    return;
  }
  device_services(device().type).fill_zero(raw_data(), device(), nbytes(), nullptr);
}

std::vector<float> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  const float* p = host.data<float>();
  return std::vector<float>(p, p + numel());
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return fmt::format("{}{} {}", dtype_name(dtype_), shape_.str(), device().str());
}

}  // namespace tandem
