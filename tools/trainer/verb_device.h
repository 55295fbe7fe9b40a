// The --device option of the verbs that run a checkpoint on one device (generate, predict).
#pragma once

#include <string>

#include "engine/core/device.h"

namespace tandem::tools {

// "cpu", or "cuda": the first GPU, after loading the CUDA plugin. Unavailable, with the plugin's
// words and the verb's name, when no GPU can be used.
Device verb_device(const std::string& verb, const std::string& name);

}  // namespace tandem::tools
