#include "engine/core/batch.h"

#include <fmt/format.h>

#include "engine/core/checksum.h"
#include "engine/core/error.h"

namespace tandem {

void Batch::set(std::string_view name, Tensor tensor) {
  for (auto& [key, value] : tensors_) {
    if (key == name) {
      value = std::move(tensor);
      return;
    }
  }
  tensors_.emplace_back(std::string(name), std::move(tensor));
}

const Tensor* Batch::find(std::string_view name) const {
  for (const auto& [key, value] : tensors_) {
    if (key == name) return &value;
  }
  return nullptr;
}

const Tensor& Batch::at(std::string_view name) const {
  const Tensor* t = find(name);
  TANDEM_CHECK(t != nullptr, ErrorCode::kInvalidArgument, "the batch has no tensor named '{}'; it has: {}", name,
               empty() ? std::string("nothing") : describe());
  return *t;
}

int64_t Batch::size() const {
  if (tensors_.empty() || !tensors_.front().second.defined() || tensors_.front().second.rank() == 0) return 0;
  return tensors_.front().second.dim(0);
}

std::string Batch::describe() const {
  std::string out;
  for (const auto& [key, value] : tensors_) {
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", key, value.defined() ? value.describe() : "(undefined)");
  }
  return out;
}

uint32_t batch_fingerprint(const Batch& batch) {
  // One CRC per tensor (of its description and its bytes in memory order), then one over those.
  std::vector<uint32_t> parts;
  for (const auto& [key, value] : batch.tensors()) {
    // Not the device: a checkpoint may be resumed on another one.
    std::string head = value.defined() ? fmt::format("{} {} {}", key, dtype_name(value.dtype()), value.shape().str())
                                       : key + " undefined";
    parts.push_back(checksum_crc32c(head.data(), head.size()));
    if (!value.defined()) continue;
    Tensor host = value.to(Device::cpu());
    parts.push_back(checksum_crc32c(host.raw_data(), host.nbytes()));
  }
  return checksum_crc32c(parts.data(), parts.size() * sizeof(uint32_t));
}

}  // namespace tandem
