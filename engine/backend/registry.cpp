#include "engine/backend/registry.h"

#include <atomic>

#include "engine/backend/cpu/cpu_backend.h"

namespace tandem::backend {
namespace {

std::atomic<const KernelTable*> cpu_table{nullptr};
std::atomic<const KernelTable*> cuda_table{nullptr};

}  // namespace

void register_backends() { register_kernels(DeviceType::kCpu, &cpu::kernel_table()); }

void register_kernels(DeviceType type, const KernelTable* table) {
  (type == DeviceType::kCpu ? cpu_table : cuda_table).store(table);
}

const KernelTable& kernels_for(DeviceType type) {
  const KernelTable* table = (type == DeviceType::kCpu ? cpu_table : cuda_table).load();
  if (table == nullptr && type == DeviceType::kCpu) {
    register_backends();  // the CPU is always there; registering on first use keeps callers simple
    table = cpu_table.load();
  }
  TANDEM_CHECK(table != nullptr, ErrorCode::kUnavailable,
               "no kernels registered for {}: the CUDA backend plugin is not loaded (run `trainer doctor`)",
               device_type_name(type));
  return *table;
}

}  // namespace tandem::backend
