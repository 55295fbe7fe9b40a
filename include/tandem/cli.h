// The `trainer` command line as a function (link Tandem::tandem_cli). A program that registers
// its own models (models::register_model) and then calls trainer_main is `trainer` with those
// models: `model.name: my_model` works in its YAML configs, for training, eval and scaling.
//
//   int main(int argc, char** argv) {
//     tandem::models::register_model("my_model", make_my_model);
//     return tandem::trainer_main(argc, argv);
//   }
#pragma once

namespace tandem {

// Parses argv as `trainer` does and runs the verb; returns the exit code: 0 success, 1 a failure
// the message on stderr explains, 2 a usage error, 128 + signal for a run stopped by SIGINT or
// SIGTERM after its checkpoint. Errors are caught and printed here, never thrown.
int trainer_main(int argc, char** argv);

}  // namespace tandem
