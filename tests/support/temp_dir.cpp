// mkdtemp gives a unique, private folder even when test binaries run in parallel (ctest -j).
#include "tests/support/temp_dir.h"

#include <stdlib.h>

#include <stdexcept>

namespace tandem::testing {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "tandem-test-XXXXXX").string();
  char* made = ::mkdtemp(pattern.data());
  if (made == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
  std::filesystem::remove_all(path_, ec);
}

}  // namespace tandem::testing
