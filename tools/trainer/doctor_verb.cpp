// `trainer doctor [--json] [--device D] [--lib-dir DIR]...`: why the GPU is or is not used, and
// what to do. Exit 0 for "ready: cuda" and "ready: cpu only", 1 for "not ready".
// (--config FILE waits for the YAML config system; --device stands in for its `device` key.)
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/backend/doctor/doctor.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {

void add_doctor_verb(CLI::App& app, int& exit_code) {
  struct Args {
    bool json = false;
    std::string device = "auto";
    std::vector<std::string> lib_dirs;
  };
  auto args = std::make_shared<Args>();
  CLI::App* verb = app.add_subcommand("doctor", "Diagnose the NVIDIA driver, CUDA libraries and GPUs: ready or not, and why");
  verb->add_flag("--json", args->json, "Print one JSON document instead of text");
  verb->add_option("--device", args->device, "The device a run would ask for: a missing GPU is 'not ready' for cuda")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  verb->add_option("--lib-dir", args->lib_dirs,
                   "Probe only these folders for the CUDA libraries (also TANDEM_DOCTOR_LIB_DIRS, colon separated)");
  verb->callback([args, &exit_code] {
    backend::DoctorOptions options;
    options.lib_dirs = args->lib_dirs;
    options.required_device = args->device;
    options.probe_plugin = true;  // as the trainer will at start (not with --lib-dir)
    backend::DoctorReport report = backend::run_doctor(options);
    fmt::print("{}", args->json ? backend::render_json(report) : backend::render_text(report));
    exit_code = report.exit_code();
  });
}

}  // namespace tandem::tools
