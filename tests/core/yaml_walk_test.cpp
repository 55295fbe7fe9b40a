// The strict YAML reader's value checks: integers that a narrower field holds, finite number
// lists, and --set values whose aliases would expand into millions of nodes.
#include "engine/core/yaml_walk.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace tandem {
namespace {

bool contains(const Error& e, std::string_view part) { return std::string(e.what()).find(part) != std::string::npos; }

// The error fn throws, or a failure when it throws none.
template <typename F>
Error error_of(F fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::kInternal, "no error");
}

TEST(YamlWalk, AsIntInRefusesWhatTheFieldCannotHoldAndNamesTheKey) {
  YAML::Node root = yaml::load("image:\n  height: 4294967324\n  width: 224\n", "test.yaml");
  // 4294967324 cast to an int is 28: a config asking for 4 G rows once trained on 28.
  Error e = error_of([&] { yaml::as_int_in(root["image"]["height"], "image.height", 0, 65535); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "image.height (line 2): must be in [0, 65535], got 4294967324")) << e.what();
  EXPECT_EQ(yaml::as_int_in(root["image"]["width"], "image.width", 0, 65535), 224);
  EXPECT_EQ(yaml::as_int_in(YAML::Node("65535"), "x", 0, 65535), 65535);
  EXPECT_EQ(yaml::as_int_in(YAML::Node("-3"), "x", -3, 3), -3);
  EXPECT_THROW(yaml::as_int_in(YAML::Node("-1"), "x", 0, 65535), Error);
  EXPECT_THROW(yaml::as_int_in(YAML::Node("1.5"), "x", 0, 65535), Error);
}

TEST(YamlWalk, AsNumbersRefusesNanAndInfinity) {
  YAML::Node root = yaml::load("mean: [.nan, 0.5, 0.5]\nscale: [0.1, .inf]\nlow: [-.inf]\nok: [0.25, -1, 3e2]\n",
                               "test.yaml");
  Error e = error_of([&] { yaml::as_numbers(root["mean"], "image.mean", 3); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "image.mean[0] (line 1): expected a finite number, got .nan")) << e.what();
  e = error_of([&] { yaml::as_numbers(root["scale"], "augment.scale", 2); });
  EXPECT_TRUE(contains(e, "augment.scale[1] (line 2): expected a finite number, got .inf")) << e.what();
  EXPECT_THROW(yaml::as_numbers(root["low"], "low"), Error);
  EXPECT_EQ(yaml::as_numbers(root["ok"], "ok"), (std::vector<double>{0.25, -1.0, 300.0}));
}

// "[&l0 [1, ... 1], &l1 [*l0, ... *l0], ...]": `levels` lists of ten, each of ten of the one
// before, so the last one stands for 10^levels numbers in a few hundred bytes.
std::string alias_bomb(int levels) {
  std::string text = "[&l0 [1,1,1,1,1,1,1,1,1,1]";
  for (int level = 1; level < levels; ++level) {
    text += ", &l" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i) text += (i == 0 ? "*l" : ",*l") + std::to_string(level - 1);
    text += "]";
  }
  return text + "]";
}

TEST(YamlWalk, AnOverrideWhoseAliasesExpandPastTheLimitIsRefused) {
  // 10^6 numbers (1.1 M nodes): copied in full once, a 9-level value took the machine's memory.
  const std::string bomb = alias_bomb(6);
  ASSERT_LT(bomb.size(), 400u);
  YAML::Node root = yaml::load("train:\n  lr: 0.1\n", "test.yaml");
  Error e = error_of([&] { yaml::apply_override(root, "train.lr=" + bomb); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e, "more than 100000 YAML nodes")) << e.what();
  EXPECT_TRUE(contains(e, "aliases")) << e.what();
  EXPECT_EQ(root["train"]["lr"].as<double>(), 0.1) << "a refused override changes nothing";
}

TEST(YamlWalk, OrdinaryOverridesStillApplyWithAliasesExpanded) {
  YAML::Node root = yaml::load("train:\n  lr: 0.1\n", "test.yaml");
  yaml::apply_override(root, "train.lr=0.5");
  yaml::apply_override(root, "data.image.mean=[0.5, 0.5, 0.5]");
  yaml::apply_override(root, "model.sizes=[&s 64, *s, 128]");
  yaml::apply_override(root, "model.blocks=" + alias_bomb(4));  // 12,345 nodes: under the limit
  EXPECT_EQ(root["train"]["lr"].as<double>(), 0.5);
  EXPECT_EQ(yaml::as_numbers(root["data"]["image"]["mean"], "data.image.mean", 3),
            (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(yaml::as_ints(root["model"]["sizes"], "model.sizes", 1), (std::vector<int64_t>{64, 64, 128}));
  EXPECT_EQ(yaml::where(root["model"]["sizes"], "model.sizes"), "model.sizes (set on the command line)");
  ASSERT_EQ(root["model"]["blocks"].size(), 4u);
  EXPECT_EQ(root["model"]["blocks"][3][9][9][9][9].as<int>(), 1);
}

}  // namespace
}  // namespace tandem
