// Fuzz-style robustness for a fixed budget: random and mutated byte strings fed to the
// TFRecord reader (every compression and policy) and to both Example parsers must give
// records or tandem::Error, never a crash, a hang or a wild allocation.
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "data/example.h"
#include "data/example_fast.h"
#include "data/tfrecord_reader.h"
#include "data/tfrecord_writer.h"
#include "engine/core/error.h"
#include "engine/core/random.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

constexpr auto kBudget = std::chrono::milliseconds(2500);

std::string mutate(std::string s, Generator& g) {
  int edits = 1 + static_cast<int>(g.below(6));
  for (int i = 0; i < edits && !s.empty(); ++i) {
    size_t at = g.below(s.size());
    switch (g.below(5)) {
      case 0: s[at] = static_cast<char>(s[at] ^ (1 << g.below(8))); break;
      case 1: s[at] = static_cast<char>(g.next_u32()); break;
      case 2: s.erase(at, g.below(16) + 1); break;
      case 3: s.insert(at, std::string(g.below(16) + 1, static_cast<char>(g.next_u32()))); break;
      case 4: s.resize(at); break;
    }
  }
  return s;
}

std::string random_bytes(Generator& g, size_t max) {
  std::string s(g.below(max), '\0');
  for (char& c : s) c = static_cast<char>(g.next_u32());
  return s;
}

// Reads a file to its end under a policy; only tandem::Error may escape.
void read_through(const std::string& path, OnCorrupt policy, Compression c, size_t buffer_size) {
  TFRecordReaderOptions options;
  options.on_corrupt = policy;
  options.compression = c;
  options.quarantine_path = path + ".q";
  options.buffer_size = buffer_size;
  try {
    TFRecordReader reader(path, options);
    std::string_view r;
    for (int n = 0; n < 100000 && reader.next(&r); ++n) {
      try {
        parse_record(r);
      } catch (const Error&) {
      }
    }
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::kDataLoss) << e.what();
  }
}

std::string seed_file(Compression c, const testing::TempDir& tmp) {
  FeatureMap f = {{"image/encoded", Feature::of_bytes({"\xff\xd8 jpeg"})}, {"label", Feature::of_ints({3})},
                  {"x", Feature::of_floats({0.5f, 1.5f})}};
  std::string path = tmp.file("seed");
  {
    TFRecordWriterOptions o;
    o.compression = c;
    TFRecordWriter w(path, o);
    for (int i = 0; i < 4; ++i) w.write(serialize_example(f));
  }
  return testing::read_file(path);
}

TEST(Fuzz, ReaderAndParsersSurviveRandomAndMutatedBytes) {
  google::protobuf::LogSilencer quiet;  // protobuf logs each bad UTF-8 key it meets
  spdlog::level::level_enum level = spdlog::get_level();
  spdlog::set_level(spdlog::level::off);  // thousands of expected skip warnings
  testing::TempDir tmp;
  Generator g(2024);
  const std::string seeds[] = {seed_file(Compression::kNone, tmp), seed_file(Compression::kGzip, tmp),
                               seed_file(Compression::kZlib, tmp)};
  const std::string example = serialize_example({{"k", Feature::of_ints({1, 2, 3})}, {"b", Feature::of_bytes({"v"})}});
  auto start = std::chrono::steady_clock::now();
  int iterations = 0;
  std::string path = tmp.file("fuzz");
  while (std::chrono::steady_clock::now() - start < kBudget) {
    ++iterations;
    std::string bytes = g.below(4) == 0 ? random_bytes(g, 64) : mutate(seeds[g.below(3)], g);
    testing::write_file(path, bytes);
    Compression c = static_cast<Compression>(g.below(4));  // none, gzip, zlib, auto
    OnCorrupt policy = static_cast<OnCorrupt>(g.below(3));
    read_through(path, policy, c, g.below(2) == 0 ? 1 + g.below(64) : 256 * 1024);  // tiny buffers cross every boundary
    std::string payload = g.below(3) == 0 ? random_bytes(g, 48) : mutate(example, g);
    try {
      parse_record(payload);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    }
    try {
      FastExampleParser fast({"k", "b"});
      fast.parse(payload);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    }
  }
  spdlog::set_level(level);
  EXPECT_GT(iterations, 100);
  std::printf("fuzz: %d inputs in %lld ms\n", iterations, static_cast<long long>(kBudget.count()));
}

}  // namespace
}  // namespace tandem::data
