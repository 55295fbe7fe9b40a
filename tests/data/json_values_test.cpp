// The JSON values JSON has no form for: float32 numbers printed as the shortest text that reads
// back as the same float, the sign of a negative zero kept (-0.0, which every parser reads as a
// float), NaN and infinities as strings, bytes as base64.
#include <gtest/gtest.h>

#include <limits>

#include "data/json_values.h"

namespace tandem::data {
namespace {

std::string array_of(std::initializer_list<float> values) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (float v : values) a.push_back(float32_json(v));
  return a.dump();
}

TEST(JsonValues, FloatsReadBackExactlyAndKeepTheSignOfZero) {
  EXPECT_EQ(array_of({-0.0f, 0.0f, 1.5f, 0.1f, -2.0f, 3.4028235e38f, 1e-45f}),
            "[-0.0,0.0,1.5,0.1,-2.0,3.4028235e+38,1e-45]");
  EXPECT_EQ(static_cast<float>(float32_as_double(0.1f)), 0.1f);
  EXPECT_EQ(float32_as_double(0.1f), 0.1);  // the double nearest 0.1, not 0.1f widened
}

TEST(JsonValues, NonFiniteFloatsAreStrings) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(array_of({std::numeric_limits<float>::quiet_NaN(), kInf, -kInf}), R"(["NaN","Infinity","-Infinity"])");
}

TEST(JsonValues, Base64PadsToWholeQuads) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\x00\x80", 3)), "/wCA");
}

}  // namespace
}  // namespace tandem::data
