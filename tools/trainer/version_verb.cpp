// `trainer version`: the Tandem version and the library versions it was built with.
#include <dnnl.hpp>
#include <fmt/format.h>

#include "tools/trainer/verbs.h"

namespace tandem::tools {

void add_version_verb(CLI::App& app, int& exit_code) {
  CLI::App* verb = app.add_subcommand("version", "Print the Tandem version and the libraries it was built with");
  verb->callback([&exit_code] {
    const dnnl_version_t* v = dnnl_version();
    fmt::print("tandem {}\noneDNN {}.{}.{} ({})\n", TANDEM_VERSION, v->major, v->minor, v->patch, v->hash);
    exit_code = 0;
  });
}

}  // namespace tandem::tools
