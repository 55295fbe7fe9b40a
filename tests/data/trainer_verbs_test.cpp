// `trainer inspect` and `trainer convert` as a user runs them: exit status 0/1/2 and output.
// Runs the built binary when it is there (build the trainer target), and skips otherwise.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "data/example.h"
#include "data/tfrecord_writer.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

const std::string kTrainer = std::string(TANDEM_BINARY_DIR) + "/tools/trainer";

// Captures stdout only, or stdout and stderr together when `with_stderr`.
int run(const std::string& args, std::string* out, bool with_stderr = false) {
  std::FILE* p = ::popen((kTrainer + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(TrainerVerbs, InspectExitStatusAndConvertRoundTrip) {
  if (!std::filesystem::exists(kTrainer)) GTEST_SKIP() << "build the trainer target to run " << kTrainer;
  testing::TempDir tmp;
  testing::write_file(tmp.file("t.csv"), "x,y,label\n1,0.5,a\n2,1.5,b\n3,2.5,a\n");
  std::string out;
  ASSERT_EQ(run("convert --source csv --csv " + tmp.file("t.csv") + " --label label --min-shards 2 --seed 3 -o " +
                    tmp.file("out"),
                &out),
            0)
      << out;
  EXPECT_NE(out.find("wrote 3 records in 2 shards"), std::string::npos) << out;
  std::string shard = tmp.file("out/data-00000-of-00002.tfrecord");
  out.clear();
  EXPECT_EQ(run("inspect --json --dump all " + shard, &out), 0);
  nlohmann::json doc = nlohmann::json::parse(out);  // one document, nothing else on stdout
  ASSERT_EQ(doc["files"].size(), 1u) << out;
  EXPECT_EQ(doc["files"][0]["kind"], "Example") << out;
  EXPECT_TRUE(doc["files"][0]["error"].is_null()) << out;

  testing::write_file(tmp.file("cut.tfrecord"), frame_record("abc").substr(0, 10));
  out.clear();
  EXPECT_EQ(run("inspect " + shard + " " + tmp.file("cut.tfrecord"), &out), 1);
  EXPECT_NE(out.find("truncated record at 0"), std::string::npos) << out;
  out.clear();
  // A missing file is a file that cannot be read (exit 1, as TFRECORD.md says), not a usage error.
  EXPECT_EQ(run("inspect " + tmp.file("missing.tfrecord"), &out), 1);
  EXPECT_NE(out.find("cannot open"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run("inspect --dump lots " + shard, &out), 2);
  EXPECT_EQ(run("inspect --compression lz4 " + shard, &out), 2);
  EXPECT_EQ(run("convert --source idx -o " + tmp.file("x"), &out), 2);  // --images and --labels missing
  out.clear();
  // 100,000 writer threads once aborted the process; now a usage error naming the option.
  EXPECT_EQ(
      run("convert --source csv --csv " + tmp.file("t.csv") + " --threads 100000 -o " + tmp.file("y"), &out, true), 2);
  EXPECT_NE(out.find("--threads: Value 100000 not in range 0 to 1024"), std::string::npos) << out;
}

TEST(TrainerVerbs, OutputPastTheFileSizeLimitIsResourceExhaustedNamingTheFile) {
  if (!std::filesystem::exists(kTrainer)) GTEST_SKIP() << "build the trainer target to run " << kTrainer;
  testing::TempDir tmp;
  std::string csv = "x,label\n";
  for (int i = 0; i < 300; ++i) csv += std::to_string(i) + ",a\n";
  testing::write_file(tmp.file("t.csv"), csv);
  std::string out;
  ASSERT_EQ(run("convert --source csv --csv " + tmp.file("t.csv") + " --label label --min-shards 1 -o " + tmp.file("o"),
                &out),
            0);
  // `ulimit -f 1`: writes past 1 KiB fail with EFBIG (the trainer ignores SIGXFSZ).
  const std::string dump = tmp.file("dump.txt");
  const std::string line = "(ulimit -f 1; " + kTrainer + " inspect --dump all " +
                           tmp.file("o/data-00000-of-00001.tfrecord") + " > " + dump + ") 2>&1";
  std::FILE* p = ::popen(line.c_str(), "r");
  char buf[4096];
  std::string err;
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) err.append(buf, n);
  const int status = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_NE(err.find("error [ResourceExhausted]"), std::string::npos) << err;
  EXPECT_NE(err.find("writing standard output: " + dump), std::string::npos) << err;
}

TEST(TrainerVerbs, ConvertTextWritesTrainingAndValidationShards) {
  if (!std::filesystem::exists(kTrainer)) GTEST_SKIP() << "build the trainer target to run " << kTrainer;
  testing::TempDir tmp;
  std::string text;
  while (text.size() < 1000) text += "The quick brown fox jumps over the lazy dog.\n";
  text.resize(1000);
  testing::write_file(tmp.file("t.txt"), text);
  std::string out;
  ASSERT_EQ(run("convert --source text --input " + tmp.file("t.txt") + " --block-size 16 --min-shards 2 -o " +
                    tmp.file("out"),
                &out),
            0)
      << out;
  EXPECT_NE(out.find("wrote 1000 bytes of text from 1 file (0 not valid UTF-8) as windows of 17 byte tokens (block "
                     "size 16, stride 16; vocabulary 256)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("train: bytes 0 to 900 of the text (900 bytes): 56 windows, 952 tokens, 3 bytes at the end in "
                     "no window; 2 shards"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("val: bytes 900 to 1000 of the text (100 bytes): 6 windows"), std::string::npos) << out;
  EXPECT_NE(out.find("in text order"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(tmp.file("out/train-00001-of-00002.tfrecord")));
  EXPECT_TRUE(std::filesystem::exists(tmp.file("out/val-00001-of-00002.tfrecord")));
  out.clear();
  ASSERT_EQ(run("convert --source text --input '" + tmp.file("*.txt") + "' --prefix lm --validation-fraction 0 "
                    "--block-size 16 --seed 4 -o " + tmp.file("other"),
                &out),
            0)
      << out;
  EXPECT_NE(out.find("no validation split"), std::string::npos) << out;
  EXPECT_NE(out.find("shuffled over the shards with seed 4"), std::string::npos) << out;
  EXPECT_NE(out.find("lm-00000-of-"), std::string::npos) << out;
  EXPECT_EQ(run("convert --source text -o " + tmp.file("x"), &out), 2);  // no --input
  EXPECT_EQ(run("convert --source text --input " + tmp.file("missing.txt") + " -o " + tmp.file("x"), &out), 1);
  EXPECT_EQ(run("convert --source text --input " + tmp.file("t.txt") + " --block-size 2000 -o " + tmp.file("x"), &out),
            1);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("x")));
}

}  // namespace
}  // namespace tandem::data
