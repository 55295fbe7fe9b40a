// `trainer generate --checkpoint DIR [--prompt TEXT] [--max-new-tokens N] [--temperature T]
// [--top-k K] [--seed S] [--device cpu|cuda] [--no-cache]`: continues a prompt with a trained GPT,
// printing each new byte as it comes. The model is built from the config the checkpoint keeps.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/core/error.h"
#include "tools/trainer/text_generation.h"
#include "tools/trainer/verb_device.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {
namespace {

struct GenerateArgs {
  std::string checkpoint, device = "cpu";
  TextGeneration request;
  bool no_cache = false;
};

// The reader of stdout went away (`generate | head`): generation stops, as a program killed by
// SIGPIPE would (SIGPIPE is ignored so that training can save a checkpoint instead of dying).
struct StdoutClosed {};

void write_out(std::string_view bytes) {
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() && std::fflush(stdout) == 0;
  if (ok) return;
  if (errno == EPIPE) throw StdoutClosed{};
  throw_error(ErrorCode::kUnavailable, "generate: writing to standard output failed: {}", std::strerror(errno));
}

int run_generate(GenerateArgs args) {
  args.request.checkpoint = args.checkpoint;
  args.request.device = verb_device("generate", args.device);
  args.request.options.use_cache = !args.no_cache;
  try {
    bool started = false;
    generate_text(args.request, [&](char c) {
      // The prompt goes out with the first new byte, once generate_text has accepted it.
      if (!started) write_out(args.request.prompt);
      started = true;
      write_out(std::string_view(&c, 1));
    });
    write_out("\n");
  } catch (const StdoutClosed&) {
    return 128 + SIGPIPE;  // as a shell reports a process SIGPIPE ended
  }
  return 0;
}

}  // namespace

void add_generate_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* verb = app.add_subcommand("generate", "Continue a prompt with a trained GPT checkpoint");
  verb->add_option("--checkpoint", args->checkpoint, "A checkpoint directory (RUN/checkpoints/step-...)")->required();
  verb->add_option("--prompt", args->request.prompt, "The text to continue (bytes are the tokens)")->capture_default_str();
  verb->add_option("--max-new-tokens", args->request.options.max_new_tokens, "Tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  verb->add_option("--temperature", args->request.options.temperature, "Softmax temperature; 0 picks the largest logit")
      ->check(finite_range(0, 100))
      ->capture_default_str();
  verb->add_option("--top-k", args->request.options.top_k, "Sample among the k largest logits only (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  verb->add_option("--seed", args->request.options.seed, "Seed of the sampling")->capture_default_str();
  verb->add_option("--device", args->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  verb->add_flag("--no-cache", args->no_cache, "Recompute the whole window for every token (no key/value cache)");
  verb->callback([&exit_code, args] { exit_code = run_generate(*args); });
}

}  // namespace tandem::tools
