// The example's own checks (ctest): the custom op's backward against finite differences, the
// loss falling, two replicas ending bitwise identical, and a stopped-and-resumed run that
// continues the step count and ends where an uninterrupted run does.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "text_model.h"
#include "text_training.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

std::map<std::string, std::vector<float>> weights(tandem::nn::Module& model) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, p] : model.named_parameters()) out[name] = p.value().to_vector();
  return out;
}

void custom_op_passes_the_gradient_checker() {
  tandem::ExecutionContext ctx(tandem::Device::cpu());
  tandem::Tensor x = tandem::Tensor::empty({2, 3, 4});
  tandem::Generator g(1);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g.uniform(-1, 1);
  auto result = tandem::autograd::check_gradients(
      ctx, [](const std::vector<tandem::autograd::Variable>& v) { return text::mean_over_tokens(v[0]); }, {x});
  check(result.ok, "mean_over_tokens passes the gradient checker (worst: " + result.worst + ")");
}

void trains_resumes_and_stays_identical(const std::filesystem::path& dir) {
  text::TrainOptions straight_options{dir / "data", dir / "straight"};
  straight_options.log = false;
  text::TrainResult straight = text::train_text_classifier(straight_options);
  check(straight.summary.steps == 64, "4 epochs of 16 steps: " + std::to_string(straight.summary.steps));
  check(straight.losses.rbegin()->second < 0.5 * straight.losses.begin()->second,
        "the loss falls: " + std::to_string(straight.losses.begin()->second) + " -> " +
            std::to_string(straight.losses.rbegin()->second));
  check(weights(*straight.replicas[0]) == weights(*straight.replicas[1]), "two replicas end bitwise identical");

  text::TrainOptions first = straight_options;
  first.run_dir = dir / "resumed";
  first.steps = 20;
  text::TrainResult stopped = text::train_text_classifier(first);
  check(stopped.summary.steps == 20, "the first run stops at step 20");
  text::TrainOptions second = first;
  second.steps = 0;
  second.resume = true;
  text::TrainResult resumed = text::train_text_classifier(second);
  check(resumed.start_step == 20 && resumed.summary.steps == 64,
        "the resumed run starts at step " + std::to_string(resumed.start_step) + " and ends at " +
            std::to_string(resumed.summary.steps));
  check(weights(*resumed.replicas[0]) == weights(*straight.replicas[0]),
        "the resumed run ends with the uninterrupted run's weights, bit for bit");
}

}  // namespace

int main() {
  const auto dir = std::filesystem::temp_directory_path() / ("tandem-text-example-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  try {
    custom_op_passes_the_gradient_checker();
    trains_resumes_and_stays_identical(dir);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    ++failures;
  }
  std::filesystem::remove_all(dir);
  return failures == 0 ? 0 : 1;
}
