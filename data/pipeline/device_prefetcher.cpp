// The double-buffered copy of batches to a replica's device (see device_prefetcher.h).
#include "data/pipeline/device_prefetcher.h"

#include <spdlog/spdlog.h>

#include "engine/core/error.h"

namespace tandem::data {

DevicePrefetcher::DevicePrefetcher(DatasetIterator batches, Device device, Stream* compute,
                                   DevicePrefetchOptions options)
    : batches_(std::move(batches)), device_(device), compute_(compute) {
  if (device.is_cpu() && !options.force_copy) return;
  TANDEM_CHECK(compute != nullptr, ErrorCode::kInvalidArgument,
               "DevicePrefetcher for {}: a compute stream is needed to order copies before compute", device.str());
  DeviceServices& services = device_services(device.type);
  copy_stream_ = services.create_stream(device.index);
  for (Slot& slot : slots_) {
    slot.copied = services.create_event(device.index);
    slot.released = services.create_event(device.index);
  }
  launch(slots_[0]);
}

DevicePrefetcher::~DevicePrefetcher() {
  if (copy_stream_ == nullptr) return;
  try {
    copy_stream_->synchronize();  // no copy may still write into buffers being freed
  } catch (const std::exception& e) {
    spdlog::error("DevicePrefetcher: synchronizing the copy stream at shutdown: {}", e.what());
  }
}

void DevicePrefetcher::launch(Slot& slot) {
  // The host memory of this slot's previous batch is freed below: its copy must be over.
  if (slot.has_batch) slot.copied->synchronize();
  slot.has_batch = batches_.next(&slot.host);
  if (!slot.has_batch) return;
  const std::vector<Tensor>& host = slot.host.tensors;
  if (slot.device.size() != host.size()) slot.device.assign(host.size(), Tensor());
  for (size_t k = 0; k < host.size(); ++k) {
    Tensor& dst = slot.device[k];
    if (!dst.defined() || !(dst.shape() == host[k].shape()) || dst.dtype() != host[k].dtype()) {
      dst = Tensor::empty(host[k].shape(), host[k].dtype(), device_, host[k].format());
    }
    dst.copy_from(host[k], copy_stream_.get());
  }
  slot.copied->record(*copy_stream_);
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
  if (other.handed_out) {
    // The consumer asks for batch n, so all its work on batch n-1 is queued: the copy of
    // batch n+1 into that buffer waits for that work, on the device, not on the host.
    other.released->record(*compute_);
    other.released->wait(*copy_stream_);
  }
  launch(other);
  cur.copied->wait(*compute_);
  cur.handed_out = true;
  *batch = cur.device;
  current_ = 1 - current_;
  return true;
}

}  // namespace tandem::data
