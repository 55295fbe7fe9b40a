// `trainer` with this program's model registered: every verb of the command line, and
// `model.name: text_classifier` accepted by the model registry (docs/EMBEDDING.md). The CLI's
// training task is image classification, so this model trains through text_training.cpp; here
// the registry and the verbs are what the program gets.
#include <tandem/cli.h>

#include "text_training.h"

int main(int argc, char** argv) {
  text::register_text_classifier();
  return tandem::trainer_main(argc, argv);
}
