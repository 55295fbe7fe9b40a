// run_bench_input: one consumer thread per replica pulls batches as fast as the pipeline
// gives them; rates are images over wall time after a warm-up, never averages of per-step rates.
#include "tools/trainer/bench_input_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "data/json_values.h"
#include "data/pipeline/replica_pipeline.h"

namespace tandem::tools {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

struct ReplicaRun {
  ReplicaRate rate;
  std::vector<data::StageSnapshot> stages;
  std::exception_ptr error;
};

void run_replica(const data::Dataset& ds, const data::PipelineBudget& budget, const BenchInputArgs& args,
                 ReplicaRun* run) {
  try {
    // Epochs follow one another as in training; repeat reshuffles and redraws augmentation.
    data::DatasetIterator it = ds.repeat().make_iterator(0, budget);
    data::Element batch;
    const auto measure_from = Clock::now() + Seconds(args.warmup_seconds);
    const auto end = measure_from + Seconds(args.seconds);
    std::vector<double> waits;
    int64_t images = 0;
    auto start = Clock::now();
    bool measuring = false;
    while (Clock::now() < end) {
      auto before = Clock::now();
      if (!it.next(&batch)) break;
      if (!measuring && before >= measure_from) {
        measuring = true;
        start = before;
      }
      if (measuring) {
        waits.push_back(std::chrono::duration<double, std::milli>(Clock::now() - before).count());
        images += batch.tensors.empty() ? 0 : batch.tensors[0].dim(0);
      }
    }
    double elapsed = Seconds(Clock::now() - start).count();
    run->rate.images_per_second = measuring && elapsed > 0 ? static_cast<double>(images) / elapsed : 0;
    run->rate.batches = static_cast<int64_t>(waits.size());
    run->rate.batch_wait_p50_ms = percentile(waits, 0.5);
    run->rate.batch_wait_p95_ms = percentile(waits, 0.95);
    run->stages = it.stats()->snapshot();
  } catch (...) {
    run->error = std::current_exception();
  }
}

void summarise_stages(const std::vector<ReplicaRun>& runs, double wall, BenchInputReport* report) {
  std::map<std::string, StageLoad> by_name;
  for (const ReplicaRun& run : runs) {
    for (const data::StageSnapshot& s : run.stages) {
      StageLoad& load = by_name[s.name];
      load.name = s.name;
      load.busy_seconds += s.busy_seconds;
      load.threads = s.parallelism;
    }
  }
  double worst = -1;
  for (auto& [name, load] : by_name) {
    load.utilisation = load.busy_seconds / (wall * load.threads * static_cast<double>(runs.size()));
    if (load.utilisation > worst) {
      worst = load.utilisation;
      report->limiting_stage = name;
    }
    report->stages.push_back(load);
  }
}

}  // namespace

BenchInputReport run_bench_input(const data::PipelineConfig& config, const BenchInputArgs& args) {
  data::ReplicaPipelines pipes = data::build_replica_pipelines(config, args.replicas);
  BenchInputReport report;
  report.plan = pipes.plan.describe();
  report.batch_size = data::replica_batch_size(config, args.replicas);
  std::vector<ReplicaRun> runs(static_cast<size_t>(args.replicas));
  auto start = Clock::now();
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < args.replicas; ++r) {
      threads.emplace_back(run_replica, std::cref(pipes.datasets[static_cast<size_t>(r)]), std::cref(pipes.budget),
                           std::cref(args), &runs[static_cast<size_t>(r)]);
    }
    for (std::thread& t : threads) t.join();
  }
  double wall = Seconds(Clock::now() - start).count();
  report.measured_seconds = args.seconds;
  double slowest = -1;
  for (int r = 0; r < args.replicas; ++r) {
    ReplicaRun& run = runs[static_cast<size_t>(r)];
    if (run.error) std::rethrow_exception(run.error);
    run.rate.replica = r;
    report.replicas.push_back(run.rate);
    report.total_images_per_second += run.rate.images_per_second;
    slowest = slowest < 0 ? run.rate.images_per_second : std::min(slowest, run.rate.images_per_second);
  }
  report.fed_step_time_ms = slowest > 0 ? 1000.0 * static_cast<double>(report.batch_size) / slowest : 0;
  summarise_stages(runs, wall, &report);
  return report;
}

std::string render_bench_input_text(const BenchInputReport& r, const BenchInputArgs& args) {
  std::string out;  // the plan was logged when the pipelines were built
  out += fmt::format("input rate over {:.1f} s after {:.1f} s warm-up, batch {} per replica:\n", r.measured_seconds,
                     args.warmup_seconds, r.batch_size);
  for (const ReplicaRate& rate : r.replicas) {
    out += fmt::format("  replica {}: {:9.1f} images/s, waited for a batch p50 {:.2f} ms, p95 {:.2f} ms\n",
                       rate.replica, rate.images_per_second, rate.batch_wait_p50_ms, rate.batch_wait_p95_ms);
  }
  out += fmt::format("  total:     {:9.1f} images/s\n", r.total_images_per_second);
  out += "stage busy time (summed over threads and replicas):\n";
  for (const StageLoad& s : r.stages) {
    out += fmt::format("  {:<24} {:8.2f} s  {:2} thread(s)/replica  {:5.1f} % busy{}\n", s.name, s.busy_seconds,
                       s.threads, 100 * s.utilisation, s.name == r.limiting_stage ? "  <- limits the rate" : "");
  }
  if (args.step_time_ms > 0) {
    bool fed = r.fed_step_time_ms <= args.step_time_ms;
    out += fmt::format("at {:.1f} ms per step the input {} {} replica(s) (it needs {:.1f} ms per batch){}\n",
                       args.step_time_ms, fed ? "keeps" : "does NOT keep", args.replicas, r.fed_step_time_ms,
                       fed ? "" : fmt::format("; raise num_parallel_calls or cpu_threads, or widen '{}'",
                                              r.limiting_stage));
  } else {
    out += fmt::format("the input keeps {} replica(s) fed at step times of {:.1f} ms or more\n", args.replicas,
                       r.fed_step_time_ms);
  }
  return out;
}

std::string render_bench_input_json(const BenchInputReport& r, const BenchInputArgs& args) {
  using Json = nlohmann::ordered_json;
  using data::float32_json;  // rates and times to float precision: shorter, and precise enough
  Json replicas = Json::array();
  for (const ReplicaRate& rate : r.replicas) {
    replicas.push_back({{"replica", rate.replica},
                        {"images_per_second", float32_json(static_cast<float>(rate.images_per_second))},
                        {"batch_wait_p50_ms", float32_json(static_cast<float>(rate.batch_wait_p50_ms))},
                        {"batch_wait_p95_ms", float32_json(static_cast<float>(rate.batch_wait_p95_ms))}});
  }
  Json stages = Json::array();
  for (const StageLoad& s : r.stages) {
    stages.push_back({{"name", s.name}, {"busy_seconds", float32_json(static_cast<float>(s.busy_seconds))},
                      {"threads_per_replica", s.threads},
                      {"utilisation", float32_json(static_cast<float>(s.utilisation))}});
  }
  Json out{{"replicas", args.replicas}, {"batch_size", r.batch_size},
           {"seconds", float32_json(static_cast<float>(r.measured_seconds))}, {"plan", r.plan},
           {"per_replica", std::move(replicas)},
           {"total_images_per_second", float32_json(static_cast<float>(r.total_images_per_second))},
           {"stages", std::move(stages)}, {"limiting_stage", r.limiting_stage},
           {"fed_step_time_ms", float32_json(static_cast<float>(r.fed_step_time_ms))}};
  if (args.step_time_ms > 0) out["keeps_replicas_fed"] = r.fed_step_time_ms <= args.step_time_ms;
  return out.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace tandem::tools
