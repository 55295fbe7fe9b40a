// The one place where backends are registered, explicitly (no static initialisers).
#pragma once

#include <string>

#include "engine/backend/kernels.h"

namespace tandem::backend {

// Registers the CPU kernels; safe to call more than once.
void register_backends();

// Installs the kernel table of a device type (the CUDA plugin calls this when loaded).
void register_kernels(DeviceType type, const KernelTable* table);

// The kernel table of a device type; throws Unavailable when none is registered.
const KernelTable& kernels_for(DeviceType type);

}  // namespace tandem::backend
