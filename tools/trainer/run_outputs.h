// What a training run leaves in its directory besides checkpoints: the directory itself, the
// run_summary.json (metrics.csv and TensorBoard events are written by
// engine/train/metrics_csv_sink.h and data/tensorboard_sink.h). docs/OUTPUTS.md has the
// layout and each file's format.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/train/metrics.h"

namespace tandem::tools {

// The run directory, created (with its parents) and returned. `requested` (from --run-dir) is
// used as given and may exist already (a resumed run). Otherwise a new directory
// runs_root/<config stem>-<yyyymmdd-hhmmss> in local time, with "-2", "-3"... when two runs start
// in the same second. Failures are tandem::Errors naming the path and the errno.
std::filesystem::path make_run_dir(const std::filesystem::path& config_path, const std::filesystem::path& requested,
                                   const std::filesystem::path& runs_root = "runs");

// run_summary.json's content: docs/OUTPUTS.md lists every field.
nlohmann::json run_summary_json(const train::RunSummary& summary);

// Writes run_summary_json(summary) to path atomically: a temporary sibling, fsync, rename, and
// an fsync of the directory, so a reader never sees half a file.
void write_run_summary(const std::filesystem::path& path, const train::RunSummary& summary);

}  // namespace tandem::tools
