// The double-buffered copy of batches to a replica's device (see device_prefetcher.h).
#include "data/pipeline/device_prefetcher.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "engine/core/error.h"

namespace tandem::data {

DevicePrefetcher::DevicePrefetcher(DatasetIterator batches, Device device, Stream* compute,
                                   DevicePrefetchOptions options)
    : batches_(std::move(batches)), device_(device), compute_(compute) {
  if (device.is_cpu() && !options.force_copy) return;
  TANDEM_CHECK(compute != nullptr, ErrorCode::kInvalidArgument,
               "DevicePrefetcher for {}: a compute stream is needed to order copies before compute", device.str());
  services_ = &device_services(device.type);
  copy_stream_ = services_->create_stream(device.index);
  for (Slot& slot : slots_) {
    slot.copied = services_->create_event(device.index);
    slot.released = services_->create_event(device.index);
  }
  launch(slots_[0]);
}

DevicePrefetcher::~DevicePrefetcher() {
  if (copy_stream_ == nullptr) return;
  try {
    copy_stream_->synchronize();  // no copy may still read or write buffers being freed
  } catch (const std::exception& e) {
    spdlog::error("DevicePrefetcher: synchronizing the copy stream at shutdown: {}", e.what());
  }
}

bool DevicePrefetcher::PinnedBuffer::reserve(DeviceServices& services, size_t bytes) {
  if (data_ != nullptr && capacity_ >= bytes) return false;
  release();
  data_ = services.allocate_host_pinned(bytes);
  services_ = &services;
  capacity_ = bytes;
  return true;
}

void DevicePrefetcher::PinnedBuffer::release() noexcept {
  if (data_ != nullptr) services_->free_host_pinned(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
}

void DevicePrefetcher::PinnedBuffer::swap(PinnedBuffer& other) noexcept {
  std::swap(services_, other.services_);
  std::swap(data_, other.data_);
  std::swap(capacity_, other.capacity_);
}

void DevicePrefetcher::stage(Slot& slot, const std::vector<Tensor>& host) {
  if (slot.staging.size() < host.size()) slot.staging.resize(host.size());
  for (size_t k = 0; k < host.size(); ++k) {
    PinnedBuffer& buffer = slot.staging[k];
    const size_t bytes = host[k].nbytes();
    const size_t before = buffer.capacity();
    if (buffer.reserve(*services_, bytes)) {
      stats_.staging_allocations += 1;
      stats_.staging_bytes_reserved += static_cast<int64_t>(bytes) - static_cast<int64_t>(before);
    }
    if (bytes > 0) std::memcpy(buffer.data(), host[k].raw_data(), bytes);
    stats_.bytes_staged += static_cast<int64_t>(bytes);
  }
}

void DevicePrefetcher::launch(Slot& slot) {
  // This slot's staging buffers are overwritten below: the copy that read them must be over.
  if (slot.has_batch) slot.copied->synchronize();
  Element host;
  slot.has_batch = batches_.next(&host);
  if (!slot.has_batch) return;
  auto start = std::chrono::steady_clock::now();
  const std::vector<Tensor>& tensors = host.tensors;
  stage(slot, tensors);
  // The copy stream follows everything the consumer has queued so far, on the device, not on the
  // host: the batch this slot held before is done with, and so is any memory the compute stream
  // freed that the allocator hands out below (its pool is the compute stream's).
  slot.released->record(*compute_);
  slot.released->wait(*copy_stream_);
  if (slot.device.size() != tensors.size()) slot.device.assign(tensors.size(), Tensor());
  for (size_t k = 0; k < tensors.size(); ++k) {
    Tensor& dst = slot.device[k];
    if (!dst.defined() || !(dst.shape() == tensors[k].shape()) || dst.dtype() != tensors[k].dtype() ||
        dst.format() != tensors[k].format()) {
      dst = Tensor::empty(tensors[k].shape(), tensors[k].dtype(), device_, tensors[k].format());
    }
    services_->copy(dst.raw_data(), device_, slot.staging[k].data(), Device::cpu(), tensors[k].nbytes(),
                    copy_stream_.get());
  }
  slot.copied->record(*copy_stream_);
  stats_.batches_copied += 1;
  stats_.copy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The host batch goes back to the pipeline now: the copy reads the staging buffers.
}

bool DevicePrefetcher::next(std::vector<Tensor>* batch) {
  if (copy_stream_ == nullptr) {
    Element host;
    if (!batches_.next(&host)) return false;
    *batch = std::move(host.tensors);
    return true;
  }
  Slot& cur = slots_[current_];
  if (!cur.has_batch) return false;
  Slot& other = slots_[1 - current_];
  // The consumer asks for batch n, so all its work on batch n-1 is queued: launch() makes the copy
  // of batch n+1 into that buffer wait for it.
  launch(other);
  cur.copied->wait(*compute_);
  cur.handed_out = true;
  *batch = cur.device;
  current_ = 1 - current_;
  return true;
}

}  // namespace tandem::data
