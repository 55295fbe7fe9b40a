#include "text_training.h"

#include <fmt/format.h>

#include <mutex>

#include "text_model.h"

namespace text {
namespace {

// A callback of the program's own: keeps the loss of each logged step and where the run began.
class LossHistory : public tandem::train::Callback {
 public:
  explicit LossHistory(TrainResult& result) : result_(result) {}
  void on_train_begin(const tandem::train::RunInfo& run, tandem::train::TrainerControl&) override {
    result_.start_step = run.start_step;
  }
  void on_step_end(const tandem::train::StepReport& step, tandem::train::TrainerControl&) override {
    if (step.has_metrics) result_.losses[step.step] = step.scalars.get("train/loss");
  }

 private:
  TrainResult& result_;
};

tandem::train::TrainConfig config_for(const TrainOptions& o) {
  tandem::train::TrainConfig c;
  c.seed = 11;
  c.device.device = "cpu";
  c.device.devices = fmt::format("cpu:{}", o.replicas);
  c.model.name = "text_classifier";
  c.model.num_classes = 4;
  c.model.in_channels = 1;
  c.model.input_size = 12;  // the sequence length
  c.loop.global_batch_size = o.global_batch;
  c.loop.epochs = o.epochs;
  c.loop.steps = o.steps;
  c.loop.log_every_steps = 4;
  c.optimizer.name = "adamw";
  c.optimizer.lr = 0.01f;
  c.schedule.name = "constant";
  c.checkpoint.every_steps = 8;
  c.checkpoint.keep_last = 0;
  c.checkpoint.resume = o.resume ? "auto" : "none";
  c.distribute.checksum_every_steps = 1;  // the replicas are compared bitwise after every step
  return c;
}

}  // namespace

void register_text_classifier() {
  static std::once_flag once;
  std::call_once(once, [] {
    tandem::models::register_model("text_classifier", [](const tandem::models::ModelSpec& spec) {
      TextClassifierSpec s;
      s.classes = spec.num_classes;
      return std::make_shared<TextClassifier>(s);
    });
  });
}

TrainResult train_text_classifier(const TrainOptions& o) {
  register_text_classifier();
  std::vector<std::string> files = write_tfrecords(o.data_dir, TextDataSpec{});
  tandem::train::TrainerSetup setup;
  setup.config = config_for(o);
  setup.plan = tandem::distribute::plan_replicas(tandem::train::plan_request(setup.config));
  TrainResult result;
  std::mutex mutex;
  const tandem::train::ModelConfig& m = setup.config.model;
  const tandem::models::ModelSpec spec{m.name, m.num_classes, m.in_channels, m.input_size, m.hidden};
  setup.make_model = [spec, &mutex, &result] {  // called on each replica's thread, after setup is moved
    auto model = tandem::models::create_model(spec);
    std::lock_guard lock(mutex);
    result.replicas.push_back(model);
    return model;
  };
  setup.task = std::make_shared<TextClassification>();
  for (int r = 0; r < o.replicas; ++r) {
    setup.train_sources.push_back(make_source(files, o.replicas, r, setup.plan.per_replica_batch_size, 5));
  }
  setup.steps_per_epoch = TextDataSpec{}.examples / o.global_batch;
  setup.run_dir = o.run_dir;  // made when missing, by the Trainer (and by MetricsCsvSink)
  setup.callbacks.push_back(std::make_shared<LossHistory>(result));
  setup.callbacks.push_back(std::make_shared<tandem::train::MetricsWriter>(
      std::make_shared<tandem::train::MetricsCsvSink>(o.run_dir)));
  if (o.log) setup.callbacks.push_back(std::make_shared<tandem::train::ProgressLogger>(false, 4));
  tandem::train::Trainer trainer(std::move(setup));
  result.summary = trainer.run();
  return result;
}

}  // namespace text
