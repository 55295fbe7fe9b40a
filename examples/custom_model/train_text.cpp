// train_text DATA_DIR RUN_DIR [--steps N] [--resume] [--replicas R]: trains the text classifier
// on TFRecords it writes into DATA_DIR, with checkpoints in RUN_DIR/checkpoints.
#include <cstdio>
#include <cstring>
#include <string>

#include "text_training.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DATA_DIR RUN_DIR [--steps N] [--resume] [--replicas R]\n", argv[0]);
    return 2;
  }
  text::TrainOptions options;
  options.data_dir = argv[1];
  options.run_dir = argv[2];
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--resume") == 0) options.resume = true;
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) options.steps = std::stoll(argv[++i]);
    if (std::strcmp(argv[i], "--replicas") == 0 && i + 1 < argc) options.replicas = std::stoi(argv[++i]);
  }
  try {
    std::printf("Tandem %s (headers %s)\n", std::string(tandem::version()).c_str(), TANDEM_VERSION_STRING);
    text::TrainResult r = text::train_text_classifier(options);
    std::printf("done: %lld steps from step %lld, train loss %.4f\n", static_cast<long long>(r.summary.steps),
                static_cast<long long>(r.start_step), r.summary.final_metrics["train_loss"]);
    return 0;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
