// Models a program registers by name: built like the built-in ones, listed with them, and
// refused when the name is taken.
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/nn/layers.h"
#include "models/registry.h"

namespace tandem::models {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(ModelRegistry, ARegisteredModelIsBuiltByNameWithTheSpec) {
  int64_t seen_classes = 0;
  register_model("registry_test_linear", [&](const ModelSpec& spec) {
    seen_classes = spec.num_classes;
    return std::make_shared<nn::Linear>(spec.in_channels * spec.input_size * spec.input_size, spec.num_classes);
  });
  auto model = create_model({.name = "registry_test_linear", .num_classes = 7, .in_channels = 1, .input_size = 2});
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(seen_classes, 7);
  EXPECT_EQ(model->named_parameters().size(), 2u);  // weight and bias
  auto names = model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "registry_test_linear"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "resnet20"), names.end());
}

TEST(ModelRegistry, TakenNamesAndEmptyFactoriesAreRefused) {
  auto factory = [](const ModelSpec&) { return std::shared_ptr<nn::Module>(); };
  EXPECT_NE(error_of([&] { register_model("resnet50", factory); }).find("is a built-in model"), std::string::npos);
  register_model("registry_test_twice", factory);
  EXPECT_NE(error_of([&] { register_model("registry_test_twice", factory); }).find("registered already"),
            std::string::npos);
  EXPECT_NE(error_of([&] { register_model("registry_test_none", nullptr); }).find("no factory"), std::string::npos);
  // A factory that returns nothing is an error when the model is built, naming it.
  EXPECT_NE(error_of([&] { create_model({.name = "registry_test_twice"}); }).find("returned null"), std::string::npos);
}

TEST(ModelRegistry, AnUnknownNameListsTheRegisteredOnesToo) {
  register_model("registry_test_listed", [](const ModelSpec& s) {
    return std::make_shared<nn::Linear>(s.input_size, s.num_classes);
  });
  const std::string what = error_of([] { create_model({.name = "registry_test_liste"}); });
  EXPECT_NE(what.find("did you mean 'registry_test_listed'"), std::string::npos) << what;
}

}  // namespace
}  // namespace tandem::models
