// The `trainer` command line: `trainer --config FILE` trains; verbs (doctor, inspect, convert,
// eval, bench-input, ...) do the rest. A function of the installed package (tandem/cli.h), so a
// program that registers its own models runs every verb with them.
// This is the only place that catches tandem::Error, prints it and picks the exit code:
// 0 success, 1 a failure the message explains, 2 a usage error; a run stopped by SIGINT or
// SIGTERM (after saving a checkpoint) exits with 128 + the signal's number, 130 or 143.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "engine/core/error.h"
#include "include/tandem/cli.h"
#include "tools/trainer/verbs.h"

namespace {

// " (standard output: PATH)", naming the file stdout was sent to, for a failed write.
std::string describe_stdout() {
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::read_symlink("/proc/self/fd/1", ec);
  return " (writing standard output: " + (ec ? std::string("?") : target.string()) +
         "; free space there, or raise `ulimit -f`)";
}

}  // namespace

int tandem::trainer_main(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f) then fails with EFBIG, which the writers report as
  // ResourceExhausted keeping every earlier checkpoint, instead of SIGXFSZ killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  // Ctrl-C under `trainer ... | tee log` stops tee too: the stop's log lines must then fail with
  // EPIPE, not kill the process (SIGPIPE) before it saves its checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  // Logs go to stderr, so stdout carries only a verb's output (`--json` documents stay parseable).
  // (Once per process: a program may call trainer_main more than once.)
  if (spdlog::get("tandem") == nullptr) spdlog::set_default_logger(spdlog::stderr_color_mt("tandem"));
  CLI::App app{"Tandem: mirrored data-parallel training on 1 to 8 GPUs (or the CPU)", "trainer"};
  app.require_subcommand(0, 1);
  int exit_code = 0;
  tandem::tools::add_version_verb(app, exit_code);
  tandem::tools::add_doctor_verb(app, exit_code);
  tandem::tools::add_inspect_verb(app, exit_code);
  tandem::tools::add_convert_verb(app, exit_code);
  tandem::tools::add_bench_input_verb(app, exit_code);
  tandem::tools::add_eval_verb(app, exit_code);
  tandem::tools::add_predict_verb(app, exit_code);
  tandem::tools::add_generate_verb(app, exit_code);
  tandem::tools::add_export_verb(app, exit_code);
  tandem::tools::add_scaling_verb(app, exit_code);
  tandem::tools::add_train_verb(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "error [%s]: %s\n", std::string(tandem::error_code_name(e.code())).c_str(), e.what());
    return 1;
  } catch (const std::system_error& e) {
    // fmt::print's failed write of a verb's output (ulimit -f, a full disk), or a thread the
    // system would not start: the system's reason, not a bug.
    const int err = e.code().value();
    const bool exhausted = err == EFBIG || err == ENOSPC || err == EDQUOT || err == EAGAIN;
    // A filesystem_error names its own paths; only fmt's failed writes are stdout's.
    const bool output = dynamic_cast<const std::filesystem::filesystem_error*>(&e) == nullptr &&
                        (err == EFBIG || err == ENOSPC || err == EDQUOT);
    std::fprintf(stderr, "error [%s]: %s%s\n", exhausted ? "ResourceExhausted" : "Internal", e.what(),
                 output ? describe_stdout().c_str() : "");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error [Internal]: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
