// OutputFile and write_file_atomically: only a missing path or a regular file is replaced, through
// a unique temporary created exclusively beside it; a FIFO, device, directory or symlink at the
// target is refused before anything is written, and a failure leaves no temporary behind.
#include "engine/core/output_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

// The names in a folder, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The error write_file_atomically throws, or a failure when it throws none.
Error refusal(const fs::path& path, std::string_view bytes = "new") {
  try {
    write_file_atomically(path, bytes, "export");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "writing " << path << " did not throw";
  return Error(ErrorCode::kInternal, "no error");
}

bool contains(const Error& e, std::string_view part) { return std::string(e.what()).find(part) != std::string::npos; }

mode_t lstat_mode(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

TEST(OutputFile, ReplacesARegularFile) {
  TempDir dir;
  write_file(dir / "model.onnx", "old content, longer than the new");
  write_file_atomically(dir / "model.onnx", "new", "export");
  EXPECT_EQ(read_file(dir / "model.onnx"), "new");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"model.onnx"});
}

TEST(OutputFile, CreatesANewFileReadableByOthers) {
  TempDir dir;
  const mode_t old_mask = ::umask(022);
  write_file_atomically(dir / "report.json", "{}", "report");
  EXPECT_EQ(read_file(dir / "report.json"), "{}");
  // mkostemp makes 0600; the file is meant to be shared as an ordinary output is (0666 less the umask).
  EXPECT_EQ(fs::status(dir / "report.json").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  // A tighter umask gives a tighter file, as open(2) would; a replaced file keeps its own permissions.
  ::umask(077);
  write_file_atomically(dir / "private.json", "{}", "report");
  EXPECT_EQ(fs::status(dir / "private.json").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(dir / "report.json", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_write);
  write_file_atomically(dir / "report.json", "[]", "report");
  EXPECT_EQ(fs::status(dir / "report.json").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_write);
  ::umask(old_mask);
}

TEST(OutputFile, RefusesAFifoAndWritesNothingToIt) {
  TempDir dir;
  const fs::path fifo = dir / "out.pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO for writing blocks until a reader comes; renaming over it replaced the pipe.
  Error e = refusal(fifo);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "a FIFO (named pipe)")) << e.what();
  EXPECT_TRUE(contains(e, "nothing was written")) << e.what();
  EXPECT_TRUE(S_ISFIFO(lstat_mode(fifo)));
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.pipe"});
}

TEST(OutputFile, RefusesASymlinkAndLeavesItAndItsTarget) {
  TempDir dir;
  write_file(dir / "victim", "keep me");
  fs::create_symlink(dir / "victim", dir / "out");
  Error e = refusal(dir / "out");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "a symbolic link")) << e.what();
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "out")));
  EXPECT_EQ(fs::read_symlink(dir / "out"), dir / "victim");
  EXPECT_EQ(read_file(dir / "victim"), "keep me");
}

TEST(OutputFile, RefusesADirectoryAndAPathEndingInASeparator) {
  TempDir dir;
  fs::create_directory(dir / "runs");
  Error e = refusal(dir / "runs");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "is a directory")) << e.what();
  e = refusal(dir.file("runs") + "/");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "names a folder, not a file")) << e.what();
  EXPECT_TRUE(fs::is_directory(dir / "runs"));
  EXPECT_TRUE(fs::is_empty(dir / "runs"));
}

TEST(OutputFile, RefusesAnEmptyPath) {
  Error e = refusal("");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "export: the output path is empty")) << e.what();
}

TEST(OutputFile, DevNullStaysACharacterDevice) {
  // `--output /dev/null` once turned the machine's /dev/null into a regular file (as root).
  Error e = refusal("/dev/null");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "a character device")) << e.what();
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(OutputFile, ASymlinkAtTheOldFixedTemporaryNameIsNotFollowed) {
  // Writers once wrote "PATH.tmp" with O_TRUNC: a symlink planted there had its target overwritten.
  TempDir dir;
  write_file(dir / "victim", "keep me");
  fs::create_symlink(dir / "victim", dir / "model.onnx.tmp");
  write_file_atomically(dir / "model.onnx", "new", "export");
  EXPECT_EQ(read_file(dir / "model.onnx"), "new");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir / "model.onnx")));
  EXPECT_EQ(read_file(dir / "victim"), "keep me");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "model.onnx.tmp")));
}

TEST(OutputFile, TheTemporaryIsUniqueBesideTheTargetAndRenamedOnCommit) {
  TempDir dir;
  OutputFile file(dir / "model.onnx", "export");
  EXPECT_EQ(file.temp_path().parent_path(), dir.path());
  EXPECT_TRUE(file.temp_path().filename().string().starts_with(".model.onnx.tmp-")) << file.temp_path();
  file.write("abc");
  file.write(std::string_view("def"));
  EXPECT_FALSE(fs::exists(dir / "model.onnx")) << "the target appears only at commit";
  file.commit();
  EXPECT_EQ(read_file(dir / "model.onnx"), "abcdef");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"model.onnx"});
}

TEST(OutputFile, DestroyedWithoutCommitLeavesNoFileAndTheOldContent) {
  TempDir dir;
  {
    OutputFile file(dir / "new.bin", "export");
    file.write("partial");
    EXPECT_TRUE(fs::exists(file.temp_path()));
  }
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{});

  write_file(dir / "old.bin", "previous");
  {
    OutputFile file(dir / "old.bin", "export");
    file.write("half of the next");
  }
  EXPECT_EQ(read_file(dir / "old.bin"), "previous");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"old.bin"});
}

TEST(OutputFile, AFifoMadeAtTheTargetBeforeCommitIsRefusedAndTheTemporaryRemoved) {
  TempDir dir;
  const fs::path target = dir / "out.bin";
  {
    OutputFile file(target, "export");
    file.write("content");
    ASSERT_EQ(::mkfifo(target.c_str(), 0600), 0);  // after the first check, before the rename
    try {
      file.commit();
      FAIL() << "committed over a FIFO";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_TRUE(contains(e, "a FIFO (named pipe)")) << e.what();
    }
  }
  EXPECT_TRUE(S_ISFIFO(lstat_mode(target)));
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
}

TEST(OutputFile, CheckReplaceableOutputAcceptsAMissingOrRegularFileOnly) {
  TempDir dir;
  EXPECT_NO_THROW(check_replaceable_output(dir / "absent", "checkpoint"));
  write_file(dir / "regular", "x");
  EXPECT_NO_THROW(check_replaceable_output(dir / "regular", "checkpoint"));
  fs::create_symlink(dir / "regular", dir / "link");
  try {
    check_replaceable_output(dir / "link", "checkpoint");
    FAIL() << "a symlink was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(e, "checkpoint: the output")) << e.what();
  }
}

}  // namespace
}  // namespace tandem
