// The `trainer` binary: the command line of tandem/cli.h with the built-in models.
#include "include/tandem/cli.h"

int main(int argc, char** argv) { return tandem::trainer_main(argc, argv); }
