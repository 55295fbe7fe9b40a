// One damaged safetensors file per validation rule: each must give DataLoss (Unimplemented for a
// valid dtype Tandem lacks) naming the file, the tensor where there is one, and what is wrong.
#include <gtest/gtest.h>

#include "engine/train/checkpoint/safetensors.h"
#include "tests/train/checkpoint_util.h"

namespace tandem::train {
namespace {

using testing::append;
using testing::append_u64;

struct Case {
  std::string name;
  std::vector<uint8_t> bytes;
  std::vector<std::string> expect;  // substrings of the message
  ErrorCode code = ErrorCode::kDataLoss;
};

std::vector<uint8_t> with_header(std::string header, size_t data_bytes, std::optional<uint64_t> length = {}) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> out;
  append_u64(out, length.value_or(header.size()));
  append(out, header);
  out.resize(out.size() + data_bytes, 0xAB);
  return out;
}

// Two tensors, "a" (f32 [2], bytes [0, 8)) and "b" (i32 [1], bytes [8, 12)), with entries to vary.
std::string two(const std::string& a, const std::string& b = R"({"dtype":"I32","shape":[1],"data_offsets":[8,12]})") {
  return R"({"a":)" + a + R"(,"b":)" + b + "}";
}
const std::string kGoodA = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"too_short", {1, 2, 3, 4, 5}, {"5 bytes, too short"}});
  c.push_back({"huge_header_length", with_header(two(kGoodA), 12, 1'000'000'000),
               {"header length 1000000000 exceeds"}});
  c.push_back({"header_past_end", with_header(two(kGoodA), 12, 4096), {"header length 4096 runs past the end"}});
  c.push_back({"not_an_object", with_header(R"(["a"])", 0), {"does not start with '{'"}});
  c.push_back({"bad_json", with_header(R"({"a":{"dtype":)", 12), {"not valid JSON"}});
  c.push_back({"entry_not_object", with_header(two("7"), 12), {"tensor 'a'", "not an object"}});
  c.push_back({"missing_offsets", with_header(two(R"({"dtype":"F32","shape":[2]})"), 12),
               {"tensor 'a'", "no \"data_offsets\""}});
  c.push_back({"unknown_dtype", with_header(two(R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})"), 12),
               {"tensor 'a'", "unknown dtype \"F33\""}});
  c.push_back({"unsupported_dtype", with_header(two(R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})"), 12),
               {"tensor 'a'", "dtype F64"}, ErrorCode::kUnimplemented});
  c.push_back({"negative_dim", with_header(two(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), 12),
               {"tensor 'a'", "not a non-negative integer"}});
  c.push_back({"fractional_offset", with_header(two(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.5]})"), 12),
               {"tensor 'a'", "not [begin, end]"}});
  c.push_back({"end_before_begin", with_header(two(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), 12),
               {"tensor 'a'", "end before they begin"}});
  c.push_back({"out_of_bounds", with_header(two(kGoodA, R"({"dtype":"I32","shape":[1],"data_offsets":[8,12]})"), 10),
               {"tensor 'b'", "run past the end of the data section (10 bytes)"}});
  c.push_back({"size_mismatch", with_header(two(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), 12),
               {"tensor 'a'", "span 8 bytes but F32 x [3] needs 12"}});
  c.push_back({"overlap", with_header(two(kGoodA, R"({"dtype":"I32","shape":[1],"data_offsets":[4,8]})"), 8),
               {"tensor 'b'", "overlap tensor 'a'"}});
  c.push_back({"gap", with_header(two(kGoodA, R"({"dtype":"I32","shape":[1],"data_offsets":[12,16]})"), 16),
               {"tensor 'b'", "leave bytes [8, 12)"}});
  c.push_back({"not_from_zero", with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
               {"tensor 'a'", "leave bytes [0, 4)"}});
  c.push_back({"trailing_bytes", with_header(two(kGoodA), 20), {"cover 12 bytes but the data section holds 20"}});
  c.push_back({"overflow",
               with_header(two(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"), 12),
               {"tensor 'a'", "overflows"}});
  c.push_back({"metadata_not_strings", with_header(R"({"__metadata__":{"format":3}})", 0),
               {"\"__metadata__\" entry 'format'", "not a string"}});
  // Deep nesting and a huge value must give a short message, not a deep recursion or a flood.
  std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  c.push_back({"deeply_nested", with_header(two(R"({"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,8]})"), 12),
               {"tensor 'a'", "holds an array of 1, not a non-negative integer"}});
  std::string huge = "\"" + std::string(1'000'000, 'x') + "\"";
  c.push_back({"huge_dtype", with_header(two(R"({"dtype":)" + huge + R"(,"shape":[2],"data_offsets":[0,8]})"), 12),
               {"tensor 'a'", "unknown dtype"}});
  std::vector<uint8_t> truncated = with_header(two(kGoodA), 12);
  truncated.resize(truncated.size() - 3);
  c.push_back({"truncated", truncated, {"tensor 'b'", "run past the end of the data section (9 bytes)"}});
  return c;
}

TEST(SafetensorsCorrupt, TheUndamagedBaseFileReads) {
  testing::TempDir dir;
  testing::write_bytes(dir / "good.safetensors", with_header(two(kGoodA), 12));
  EXPECT_EQ(read_safetensors(dir / "good.safetensors").tensors.size(), 2u);
}

TEST(SafetensorsCorrupt, EachRuleGivesItsError) {
  testing::TempDir dir;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::filesystem::path path = dir / (c.name + ".safetensors");
    testing::write_bytes(path, c.bytes);
    for (bool header_only : {true, false}) {
      try {
        if (header_only) {
          read_safetensors_header(path);
        } else {
          read_safetensors(path);
        }
        ADD_FAILURE() << "no error for " << c.name;
      } catch (const Error& e) {
        std::string message = e.what();
        EXPECT_EQ(e.code(), c.code) << message;
        EXPECT_LT(message.size(), 600u) << message.substr(0, 600);
        EXPECT_NE(message.find(path.string()), std::string::npos) << message;
        for (const auto& s : c.expect) EXPECT_NE(message.find(s), std::string::npos) << "'" << s << "' in " << message;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::train
