// The verbs of the `trainer` binary. Each verb file defines one add_*_verb function that adds
// its subcommand with its options, and a callback that runs it and stores its exit status.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::tools {

void add_version_verb(CLI::App& app, int& exit_code);
void add_doctor_verb(CLI::App& app, int& exit_code);
void add_inspect_verb(CLI::App& app, int& exit_code);
void add_convert_verb(CLI::App& app, int& exit_code);
void add_bench_input_verb(CLI::App& app, int& exit_code);
// The main job has no verb: `trainer --config FILE` (options on the app itself).
void add_train_verb(CLI::App& app, int& exit_code);
void add_eval_verb(CLI::App& app, int& exit_code);
void add_generate_verb(CLI::App& app, int& exit_code);
void add_scaling_verb(CLI::App& app, int& exit_code);

}  // namespace tandem::tools
