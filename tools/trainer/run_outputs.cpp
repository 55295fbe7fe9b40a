// The run directory and run_summary.json. The summary is written the way checkpoints are (engine/
// train/checkpoint/posix.h), so a crash or a full disk never leaves a truncated summary behind.
#include "tools/trainer/run_outputs.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <ctime>
#include <fstream>
#include <string>
#include <system_error>

#include "engine/core/error.h"
#include "engine/core/output_file.h"
#include "engine/train/checkpoint/fs.h"
#include "engine/train/checkpoint/posix.h"

namespace tandem::tools {
namespace {

void create_directories_checked(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw_error(ec == std::errc::no_space_on_device ? ErrorCode::kResourceExhausted : ErrorCode::kFailedPrecondition,
                "cannot create the run directory '{}': {} (errno {})", dir.string(), ec.message(), ec.value());
  }
  TANDEM_CHECK(std::filesystem::is_directory(dir, ec), ErrorCode::kFailedPrecondition,
               "the run directory '{}' exists and is not a directory", dir.string());
}

std::string local_timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%d-%H%M%S", &tm);
  return text;
}

nlohmann::json phase(double seconds, double total, int64_t steps) {
  return {{"ms_per_step", steps > 0 ? 1000.0 * seconds / static_cast<double>(steps) : 0.0},
          {"fraction", total > 0 ? seconds / total : 0.0}};
}

}  // namespace

std::filesystem::path make_run_dir(const std::filesystem::path& config_path, const std::filesystem::path& requested,
                                   const std::filesystem::path& runs_root) {
  if (!requested.empty()) {
    create_directories_checked(requested);
    return requested;
  }
  create_directories_checked(runs_root);
  std::string stem = config_path.stem().string();
  std::string base = fmt::format("{}-{}", stem.empty() ? "run" : stem, local_timestamp());
  // mkdir, not create_directories: EEXIST tells that another run took the name, so try the next.
  for (int n = 1;; ++n) {
    std::filesystem::path dir = runs_root / (n == 1 ? base : fmt::format("{}-{}", base, n));
    if (::mkdir(dir.c_str(), 0755) == 0) return dir;
    int err = errno;
    if (err == EEXIST && n < 1000) continue;
    throw_error(err == ENOSPC ? ErrorCode::kResourceExhausted : ErrorCode::kFailedPrecondition,
                "mkdir '{}' failed: {} (errno {})", dir.string(), std::system_category().message(err), err);
  }
}

nlohmann::json run_summary_json(const train::RunSummary& s) {
  const train::StepBreakdown& b = s.breakdown;
  double total = b.total();
  int64_t n = s.timed_steps;
  nlohmann::json final_metrics = nlohmann::json::object();
  for (const auto& [name, value] : s.final_metrics) final_metrics[name] = value;
  // No timed step (every step was warm-up): no figure was measured, so none is written; a 0 would
  // read as a measured rate.
  const nlohmann::json none(nullptr);
  return {
      {"images_per_sec", n > 0 ? nlohmann::json(s.images_per_sec) : none},
      {"throughput_unit", s.throughput_unit},
      {"step_time_ms", n > 0 ? nlohmann::json{{"p50", s.step_time_p50_ms}, {"p95", s.step_time_p95_ms}} : none},
      {"timed_steps", n},
      {"breakdown", n > 0 ? nlohmann::json{{"input_wait", phase(b.input_wait, total, n)},
                                           {"copy", phase(b.copy, total, n)},
                                           {"forward", phase(b.forward, total, n)},
                                           {"backward", phase(b.backward, total, n)},
                                           {"all_reduce", phase(b.all_reduce, total, n)},
                                           {"optimizer", phase(b.optimizer, total, n)}}
                          : none},
      {"input_bound_verdict", n > 0 ? nlohmann::json(train::input_bound_verdict(total > 0 ? b.input_wait / total : 0.0)) : none},
      {"final_metrics", final_metrics},
      {"replicas", s.replicas},
      {"processes", s.processes},
      {"inter_process_ms_per_step", s.inter_process_ms_per_step},
      {"global_batch_size", s.global_batch_size},
      {"per_replica_batch_size", s.per_replica_batch_size},
      {"device", s.device},
      {"steps", s.steps},
      {"epochs", s.epochs},
      {"dropped_examples", s.dropped_examples},
      {"wall_time_s", s.wall_time_s},
      {"stop_signal", s.stop_signal},
  };
}

void write_run_summary(const std::filesystem::path& path, const train::RunSummary& summary) {
  nlohmann::json doc = run_summary_json(summary);
  if (summary.resumed_at_end && std::filesystem::exists(path)) {
    // Nothing was trained: the finished run's figures stay; only its metrics may gain an evaluation.
    try {
      nlohmann::json kept = nlohmann::json::parse(std::ifstream(path));
      // Only the summary of this very end: a stopped run's summary (steps short, a signal) is replaced.
      if (kept.is_object() && kept.value("steps", int64_t{-1}) == summary.steps && kept.value("stop_signal", -1) == 0) {
        for (const auto& [name, value] : doc["final_metrics"].items()) kept["final_metrics"][name] = value;
        doc = std::move(kept);
      }
    } catch (const nlohmann::json::exception& e) {
      spdlog::warn("{} cannot be read ({}); writing a new one", path.string(), e.what());
    }
  }
  // NaN (a diverged loss) becomes null rather than text no JSON parser accepts.
  std::string text = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_file_atomically(path, text, "run summary");
}

}  // namespace tandem::tools
