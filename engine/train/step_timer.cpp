#include "engine/train/step_timer.h"

#include <algorithm>

#include "engine/core/error.h"

namespace tandem::train {

StepTimer::StepTimer(ExecutionContext& ctx, int lag) : ctx_(ctx), slots_(static_cast<size_t>(std::max(lag, 0) + 1)) {
  for (Slot& s : slots_) {
    s.start = make_event();
    s.forward = make_event();
    s.backward = make_event();
    s.done = make_event();
  }
}

std::unique_ptr<Event> StepTimer::make_event() {
  return device_services(ctx_.device().type).create_timer_event(ctx_.device().index);
}

void StepTimer::start() {
  Slot& s = current();
  s.waits_used = 0;
  s.start->record(ctx_.stream());
}

void StepTimer::forward_done() { current().forward->record(ctx_.stream()); }

void StepTimer::backward_done() { current().backward->record(ctx_.stream()); }

void StepTimer::wait_begins() {
  Slot& s = current();
  if (s.waits_used == s.waits.size()) s.waits.emplace_back(make_event(), make_event());  // first steps only
  s.waits[s.waits_used].first->record(ctx_.stream());
}

void StepTimer::wait_ends() {
  Slot& s = current();
  TANDEM_CHECK(s.waits_used < s.waits.size(), ErrorCode::kInternal, "StepTimer: wait_ends without wait_begins");
  s.waits[s.waits_used++].second->record(ctx_.stream());
}

std::pair<int64_t, DevicePhases> StepTimer::read(Slot& slot) {
  slot.done->synchronize();
  DevicePhases p;
  p.forward = slot.forward->seconds_since(*slot.start);
  p.backward = slot.backward->seconds_since(*slot.forward);
  // Stalls of the stream while it waited for a bucket: the all-reduce time backward did not hide.
  for (size_t i = 0; i < slot.waits_used; ++i) {
    p.all_reduce += std::max(0.0, slot.waits[i].second->seconds_since(*slot.waits[i].first));
  }
  p.optimizer = std::max(0.0, slot.done->seconds_since(*slot.backward) - p.all_reduce);
  return {slot.step, p};
}

std::vector<std::pair<int64_t, DevicePhases>> StepTimer::step_done(int64_t step) {
  Slot& s = current();
  s.step = step;
  s.done->record(ctx_.stream());
  ++queued_;
  std::vector<std::pair<int64_t, DevicePhases>> out;
  // The slot the next step reuses must be read first; that is the step `lag` behind.
  while (queued_ - read_ >= static_cast<int64_t>(slots_.size())) {
    out.push_back(read(slots_[static_cast<size_t>(read_ % static_cast<int64_t>(slots_.size()))]));
    ++read_;
  }
  return out;
}

std::vector<std::pair<int64_t, DevicePhases>> StepTimer::drain() {
  std::vector<std::pair<int64_t, DevicePhases>> out;
  while (read_ < queued_) {
    out.push_back(read(slots_[static_cast<size_t>(read_ % static_cast<int64_t>(slots_.size()))]));
    ++read_;
  }
  return out;
}

}  // namespace tandem::train
