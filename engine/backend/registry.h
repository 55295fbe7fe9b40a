// The one place where backends are registered, explicitly (no static initialisers).
#pragma once

#include <string>

#include "engine/backend/kernels.h"
#include "engine/backend/plugin_loader.h"  // load_cuda_plugin(): the trainer calls it explicitly

namespace tandem::backend {

// Registers the CPU kernels; safe to call more than once. CUDA is not loaded here: the trainer
// calls load_cuda_plugin() (plugin_loader.h) when it wants a GPU, never a static initialiser.
void register_backends();

// Installs the kernel table of a device type (the CUDA plugin calls this when loaded).
void register_kernels(DeviceType type, const KernelTable* table);

// The kernel table of a device type; throws Unavailable when none is registered.
const KernelTable& kernels_for(DeviceType type);

}  // namespace tandem::backend
