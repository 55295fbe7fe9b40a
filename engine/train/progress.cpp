#include "engine/train/progress.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace tandem::train {

namespace {

std::atomic<bool> bar_open{false};

// "3/10", or "3" when the run is bounded by steps rather than epochs.
std::string epoch_text(const ProgressLine& l) {
  return l.epochs > 0 ? fmt::format("{}/{}", l.epoch + 1, l.epochs) : fmt::format("{}", l.epoch + 1);
}

}  // namespace

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

Progress::Progress(bool terminal, int64_t every) : terminal_(terminal), every_(every > 0 ? every : 50) {}

void Progress::update(const ProgressLine& l) {
  std::string position = l.steps_in_epoch > 0 ? fmt::format("{}/{}", l.step_in_epoch, l.steps_in_epoch)
                                              : fmt::format("{}", l.step_in_epoch);
  std::string stats = fmt::format("{:.0f} {}/s | loss {:.4f} | lr {:.4g} | input wait {:.1f}%", l.images_per_sec,
                                  l.unit, l.loss, l.lr, 100.0 * l.input_wait_fraction);
  if (!l.devices.empty()) stats += " | " + l.devices;
  if (terminal_) {
    constexpr int kWidth = 24;
    int filled = l.steps_in_epoch > 0 ? static_cast<int>(kWidth * l.step_in_epoch / l.steps_in_epoch) : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r\033[Kepoch %s [%s] %s | %s", epoch_text(l).c_str(), bar.c_str(), position.c_str(),
                 stats.c_str());
    std::fflush(stderr);
    bar_open.store(true);
    return;
  }
  if (l.global_step % every_ == 0) {
    spdlog::info("epoch {} step {} ({}) | {}", epoch_text(l), l.global_step, position, stats);
  }
}

void finish_progress_line() {
  if (bar_open.exchange(false)) std::fputc('\n', stderr);
}

}  // namespace tandem::train
