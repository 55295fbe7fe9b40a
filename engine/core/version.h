// The version of the Tandem library a program runs with (the shared libtandem_core it loaded),
// to compare with the headers it was compiled against (TANDEM_VERSION_STRING in tandem/version.h).
#pragma once

#include <string_view>

namespace tandem {

std::string_view version();  // "0.1.0"

}  // namespace tandem
