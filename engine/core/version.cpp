#include "engine/core/version.h"

namespace tandem {

std::string_view version() { return TANDEM_VERSION; }

}  // namespace tandem
