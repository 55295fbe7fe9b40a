// `trainer inspect`: what a TFRecord file holds and whether it is intact. Exit status 0
// when every file is valid, 1 when any is damaged, 2 for a usage error (CLI11's).
#include <fmt/format.h>

#include <string>
#include <vector>

#include "data/inspect.h"
#include "engine/core/error.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {

namespace {

struct InspectArgs {
  std::vector<std::string> files;
  std::string compression = "auto";
  std::string dump = "0";
  bool verify = false;
  bool json = false;
};

int64_t parse_dump(const std::string& text) {
  if (text == "all") return -1;
  try {
    size_t used = 0;
    long long n = std::stoll(text, &used);
    if (used == text.size() && n >= 0) return n;
  } catch (const std::exception&) {
  }
  throw CLI::ValidationError("--dump", "expects a record count or 'all', got '" + text + "'");
}

int run_inspect(const InspectArgs& args) {
  data::InspectOptions options;
  options.compression = data::parse_compression(args.compression);
  options.verify = args.verify;
  options.dump = parse_dump(args.dump);
  std::vector<data::FileReport> reports;
  bool damaged = false;
  for (const std::string& path : args.files) {
    reports.push_back(data::inspect_file(path, options));
    damaged = damaged || reports.back().damaged();
    if (!args.json) fmt::print("{}", data::render_text(reports.back()));
  }
  if (args.json) fmt::print("{}", data::render_json(reports));
  return damaged ? 1 : 0;
}

}  // namespace

void add_inspect_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* verb = app.add_subcommand("inspect", "Show what TFRecord files hold and check that they are intact");
  verb->add_option("files", args->files, "TFRecord files")->required();  // a missing one is reported, exit 1
  verb->add_option("--compression", args->compression, "auto, none, gzip or zlib (auto reads the magic bytes)")
      ->check(CLI::IsMember({"auto", "none", "gzip", "zlib"}));
  verb->add_flag("--verify", args->verify, "Also count a record that is not a tf.Example/SequenceExample as damage");
  verb->add_option("--dump", args->dump, "Print the first N records, or 'all'");
  verb->add_flag("--json", args->json, "One JSON document instead of text (docs/TFRECORD.md)");
  verb->callback([args, &exit_code] {
    parse_dump(args->dump);  // a usage error before any output
    exit_code = run_inspect(*args);
  });
}

}  // namespace tandem::tools
