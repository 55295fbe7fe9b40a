// The verbs of the `trainer` binary. Each verb file defines one add_*_verb function that adds
// its subcommand with its options, and a callback that runs it and stores its exit status.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace tandem::tools {

// A number option in [min, max] that refuses nan and inf: CLI::Range lets "nan" through, since
// every comparison with NaN is false.
inline CLI::Validator finite_range(double min, double max) {
  auto check = [min, max](std::string& text) -> std::string {
    double v = 0;
    if (CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v >= min && v <= max) return {};
    return "Value " + text + " is not a finite number in " + CLI::detail::to_string(min) + " to " +
           CLI::detail::to_string(max);
  };
  return CLI::Validator(check, "FINITE in [" + CLI::detail::to_string(min) + " - " + CLI::detail::to_string(max) + "]");
}

void add_version_verb(CLI::App& app, int& exit_code);
void add_doctor_verb(CLI::App& app, int& exit_code);
void add_inspect_verb(CLI::App& app, int& exit_code);
void add_convert_verb(CLI::App& app, int& exit_code);
void add_bench_input_verb(CLI::App& app, int& exit_code);
// The main job has no verb: `trainer --config FILE` (options on the app itself).
void add_train_verb(CLI::App& app, int& exit_code);
void add_eval_verb(CLI::App& app, int& exit_code);
void add_predict_verb(CLI::App& app, int& exit_code);
void add_generate_verb(CLI::App& app, int& exit_code);
void add_export_verb(CLI::App& app, int& exit_code);
void add_scaling_verb(CLI::App& app, int& exit_code);

}  // namespace tandem::tools
