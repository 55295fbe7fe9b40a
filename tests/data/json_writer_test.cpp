// JsonWriter's numbers: floats as the shortest text that reads back exactly, the sign of a
// negative zero kept in a form every JSON parser reads as a float (-0.0, not -0).
#include <gtest/gtest.h>

#include <limits>

#include "data/json_writer.h"

namespace tandem::data {
namespace {

std::string array_of(std::initializer_list<double> values) {
  JsonWriter w;
  w.begin_array();
  for (double v : values) w.float_value(v);
  w.end_array();
  return w.str();
}

TEST(JsonWriter, FloatsReadBackExactlyAndKeepTheSignOfZero) {
  EXPECT_EQ(array_of({-0.0, 0.0, 1.5, 0.1f, -2.0}), "[-0.0, 0, 1.5, 0.1, -2]");
  EXPECT_EQ(array_of({std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::infinity()}),
            "[\"NaN\", \"-Infinity\"]");
}

}  // namespace
}  // namespace tandem::data
