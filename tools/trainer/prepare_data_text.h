// `prepare:` for language models: a public-domain English text that a Debian package ships is
// printed whole into the output folder and cut into token windows (trainer convert --source
// text), the block size taken from data.tokens.length so the records always fit the config.
#pragma once

#include <string>
#include <string_view>

#include "tools/trainer/run_config.h"

namespace tandem::tools {

// Where a packaged text comes from: the program that prints it and the data it reads. Debian's
// paths by default; a test points them elsewhere to see the message a missing package gives.
struct TextPackage {
  std::string name;     // the prepare.source and Debian package name: bible-kjv
  std::string program;  // /usr/bin/bible
  std::string data;     // /usr/lib/bible.data
};

// The packaged texts prepare knows, by prepare.source; nullptr for any other source.
const TextPackage* find_text_package(std::string_view source);

// Prints the package's whole text into `path` (through a unique temporary beside it, renamed when complete);
// kNotFound naming the package to install when its program or data is missing.
void extract_packaged_text(const TextPackage& package, const std::string& path);

// When the config's TFRecords are missing: extracts the text into prepare.output_dir and writes
// train-*.tfrecord and val-*.tfrecord there (the last 10% of the text), windows of
// data.tokens.length tokens. When they are there: checks that their windows are that long.
void prepare_text(const RunConfig& config, const TextPackage& package, bool files_present);

}  // namespace tandem::tools
