#include "engine/backend/cpu/cpu_backend.h"

namespace tandem::backend::cpu {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    return t;
  }();
  return table;
}

}  // namespace tandem::backend::cpu
