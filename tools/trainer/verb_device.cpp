#include "tools/trainer/verb_device.h"

#include "engine/backend/plugin_loader.h"
#include "engine/core/error.h"

namespace tandem::tools {

Device verb_device(const std::string& verb, const std::string& name) {
  if (name == "cpu") return Device::cpu();
  const backend::CudaPluginStatus& plugin = backend::load_cuda_plugin();
  TANDEM_CHECK(plugin.loaded && plugin.device_count > 0, ErrorCode::kUnavailable,
               "{} --device cuda: no usable GPU: {} (run `trainer doctor`, or use --device cpu)", verb,
               plugin.summary());
  return Device::cuda(0);
}

}  // namespace tandem::tools
