// DeviceGuard: makes a device current for a scope and restores the previous one, so a replica
// thread's current device is never changed behind its back. The no-throw form is for destructors.
#pragma once

namespace tandem::cuda {

class DeviceGuard {
 public:
  struct NoThrow {};
  explicit DeviceGuard(int device);  // throws (cuda_check.h) when the device cannot be made current
  // For destructors and other noexcept paths: logs a failure instead, and ok() says whether the
  // device is current.
  DeviceGuard(int device, NoThrow) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  bool ok() const { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = false;
};

}  // namespace tandem::cuda
