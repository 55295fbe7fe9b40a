// `trainer doctor [--json] [--device D] [--lib-dir DIR]... [--config FILE [--set k=v]...]`: why the
// GPU is or is not used, and what to do; with a config, also what its run would use and how its data
// is laid out. Exit 0 for "ready: cuda" and "ready: cpu only", 1 for "not ready".
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/doctor/doctor.h"
#include "tools/trainer/doctor_config.h"
#include "tools/trainer/run_config.h"
#include "tools/trainer/train_setup.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {

void add_doctor_verb(CLI::App& app, int& exit_code) {
  struct Args {
    bool json = false;
    std::string device = "auto";
    std::vector<std::string> lib_dirs;
    std::string config;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<Args>();
  CLI::App* verb = app.add_subcommand("doctor", "Diagnose the NVIDIA driver, CUDA libraries and GPUs: ready or not, and why");
  verb->add_flag("--json", args->json, "Print one JSON document instead of text");
  auto* device = verb->add_option("--device", args->device,
                                  "The device a run would ask for: a missing GPU is 'not ready' for cuda "
                                  "(default: the config's device, else auto)")
                     ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  verb->add_option("--lib-dir", args->lib_dirs,
                   "Probe only these folders for the CUDA libraries (also TANDEM_DOCTOR_LIB_DIRS, colon separated)");
  verb->add_option("--config", args->config, "Also check this run config: devices, batches, data layout")
      ->check(CLI::ExistingFile);
  verb->add_option("--set", args->overrides, "Override a config key, e.g. --set train.global_batch_size=96");
  verb->callback([args, device, &exit_code] {
    std::optional<RunConfig> config;
    if (!args->config.empty()) config = load_run_config(args->config, args->overrides);
    backend::DoctorOptions options;
    options.lib_dirs = args->lib_dirs;
    options.required_device = config && device->count() == 0 ? config->train.device.device : args->device;
    options.probe_plugin = true;  // as the trainer will at start (not with --lib-dir)
    backend::DoctorReport report = backend::run_doctor(options);
    if (!config) {
      fmt::print("{}", args->json ? backend::render_json(report) : backend::render_text(report));
      exit_code = report.exit_code();
      return;
    }
    int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    ConfigCheck check = check_config(args->config, config->train, config->data.files, cores,
                                     static_cast<int>(report.gpus.size()),
                                     [](const train::TrainConfig& c, const distribute::ProcessGroupSpec& p) { return plan_for(c, p); });
    apply_to_verdict(check, report);
    if (args->json) {
      fmt::print("{}", render_json_with_config(report, check));
    } else {
      fmt::print("{}{}\n{}\n", backend::render_text(report), render_config_text(check), report.verdict_line);
    }
    exit_code = report.exit_code();
  });
}

}  // namespace tandem::tools
