// data.files patterns: matches sorted and deduplicated; a directory or a pattern that matches
// nothing is an error that says what to write instead.
#include <gtest/gtest.h>

#include <fstream>

#include "data/pipeline/replica_pipeline.h"
#include "engine/core/error.h"
#include "tests/support/temp_dir.h"

namespace tandem::data {
namespace {

TEST(ResolveFiles, MatchesAreSortedAndEachOnce) {
  ::tandem::testing::TempDir tmp;
  for (const char* name : {"b.tfrecord", "a.tfrecord"}) std::ofstream(tmp.path() / name) << "";
  std::vector<std::string> files = resolve_files({tmp.file("*.tfrecord"), tmp.file("a.tfrecord")});
  EXPECT_EQ(files, (std::vector<std::string>{tmp.file("a.tfrecord"), tmp.file("b.tfrecord")}));
}

TEST(ResolveFiles, ADirectoryIsRefusedWithThePatternToUse) {
  ::tandem::testing::TempDir tmp;
  try {
    resolve_files({tmp.path().string()});
    FAIL() << "a directory is not a TFRecord file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("is a directory; give the files in it, e.g. '" + tmp.path().string() +
                                         "/*.tfrecord'"),
              std::string::npos)
        << e.what();
  }
}

TEST(ResolveFiles, NothingMatchingIsNotFound) {
  ::tandem::testing::TempDir tmp;
  try {
    resolve_files({tmp.file("*.tfrecord")});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("no file matches"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::data
