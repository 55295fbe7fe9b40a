// einsum (composite.h) against a direct evaluation of the equation in double (every assignment of
// the letters, the product of the operands' elements added into the output's), its gradients
// against central differences, and its errors.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/autograd/gradcheck.h"
#include "tests/autograd/autograd_test_util.h"

namespace tandem::autograd {
namespace {

using tandem::testing::random_tensor;

// The equation evaluated by brute force; `output` is the explicit or implicit output's letters.
std::vector<double> reference(const std::vector<std::string>& terms, const std::string& output,
                              const std::vector<Tensor>& operands) {
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (size_t k = 0; k < terms[i].size(); ++k) size[terms[i][k]] = operands[i].shape()[static_cast<int>(k)];
  }
  std::vector<std::vector<float>> values;
  for (const Tensor& t : operands) values.push_back(t.to_vector());
  int64_t out_numel = 1;
  for (char c : output) out_numel *= size[c];
  std::vector<double> out(static_cast<size_t>(out_numel), 0.0);
  std::vector<char> letters;
  for (const auto& [c, n] : size) letters.push_back(c);
  std::map<char, int64_t> at;
  for (char c : letters) at[c] = 0;
  auto offset = [&](const std::string& term) {  // row-major, each letter's current value
    int64_t o = 0;
    for (char c : term) o = o * size[c] + at[c];
    return o;
  };
  for (;;) {
    double p = 1.0;
    for (size_t i = 0; i < terms.size(); ++i) p *= values[i][static_cast<size_t>(offset(terms[i]))];
    out[static_cast<size_t>(offset(output))] += p;
    size_t k = 0;
    for (; k < letters.size(); ++k) {
      if (++at[letters[k]] < size[letters[k]]) break;
      at[letters[k]] = 0;
    }
    if (k == letters.size()) break;
  }
  return out;
}

class EinsumTest : public ::testing::Test {
 protected:
  void expect_equation(const std::string& equation, const std::vector<std::string>& terms, const std::string& output,
                       const std::vector<Shape>& shapes) {
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < shapes.size(); ++i) inputs.push_back(random_tensor(shapes[i], 10 + i));
    std::vector<Variable> vars(inputs.begin(), inputs.end());
    const Tensor got = einsum(ctx_, equation, vars).value();
    const std::vector<double> want = reference(terms, output, inputs);
    ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << equation;
    EXPECT_EQ(got.shape().rank(), static_cast<int>(output.size())) << equation;
    const std::vector<float> g = got.to_vector();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-5) << equation << " element " << i;
    const GradCheckResult r = check_gradients(
        ctx_, [&](const std::vector<Variable>& v) { return einsum(ctx_, equation, v); }, inputs);
    EXPECT_TRUE(r.ok) << equation << ": " << r.worst;
  }
  void expect_error(const std::string& equation, const std::vector<Shape>& shapes, ErrorCode code,
                    const std::string& part) {
    std::vector<Variable> vars;
    for (const Shape& s : shapes) vars.emplace_back(random_tensor(s, 1));
    try {
      einsum(ctx_, equation, vars);
      ADD_FAILURE() << equation << " accepted; expected an error with '" << part << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_F(EinsumTest, BatchedProductsAndAttentionScores) {
  expect_equation("bij,bjk->bik", {"bij", "bjk"}, "bik", {Shape{2, 3, 4}, Shape{2, 4, 5}});
  expect_equation("bhqd,bhkd->bhqk", {"bhqd", "bhkd"}, "bhqk", {Shape{2, 2, 3, 4}, Shape{2, 2, 5, 4}});
  expect_equation("ik,kj", {"ik", "kj"}, "ij", {Shape{3, 4}, Shape{4, 2}});
}

TEST_F(EinsumTest, TransposesSumsDotsAndOuterProducts) {
  expect_equation("ij->ji", {"ij"}, "ji", {Shape{3, 4}});
  expect_equation("ijk->", {"ijk"}, "", {Shape{2, 3, 4}});
  expect_equation("ijk->ki", {"ijk"}, "ki", {Shape{2, 3, 4}});
  expect_equation("i,i->", {"i", "i"}, "", {Shape{7}, Shape{7}});
  expect_equation("i,j->ij", {"i", "j"}, "ij", {Shape{3}, Shape{4}});
  expect_equation("ij,j", {"ij", "j"}, "i", {Shape{3, 4}, Shape{4}});  // implicit: letters seen once
  expect_equation("ba", {"ba"}, "ab", {Shape{3, 2}});                    // implicit output is sorted
}

TEST_F(EinsumTest, ChainsAndLettersOfOneOperandOnly) {
  expect_equation("ij,jk,kl->il", {"ij", "jk", "kl"}, "il", {Shape{2, 3}, Shape{3, 4}, Shape{4, 5}});
  expect_equation("ij,kl->i", {"ij", "kl"}, "i", {Shape{3, 4}, Shape{2, 5}});
  expect_equation("bn,anc->bac", {"bn", "anc"}, "bac", {Shape{2, 3}, Shape{4, 3, 5}});
  expect_equation("i j , j k -> k i", {"ij", "jk"}, "ki", {Shape{2, 3}, Shape{3, 4}});  // spaces are ignored
}

TEST_F(EinsumTest, ErrorsNameTheEquationAndTheFault) {
  expect_error("ij,jk->ik", {Shape{2, 3}, Shape{4, 5}}, ErrorCode::kInvalidArgument,
               "letter 'j' of 'ij,jk->ik' has size 3 in operand 0 but 4 in operand 1");
  expect_error("ij,jk->ik", {Shape{2, 3}}, ErrorCode::kInvalidArgument, "names 2 operands, but 1 were given");
  expect_error("ijk->i", {Shape{2, 3}}, ErrorCode::kInvalidArgument, "term 'ijk' of 'ijk->i' has 3 letters");
  expect_error("ij->iz", {Shape{2, 3}}, ErrorCode::kInvalidArgument, "output letter 'z'");
  expect_error("i1->i", {Shape{2, 3}}, ErrorCode::kInvalidArgument, "holds '1'");
  expect_error("ii->i", {Shape{3, 3}}, ErrorCode::kUnimplemented, "letter 'i' repeats in term 'ii'");
  expect_error("ij->ii", {Shape{3, 3}}, ErrorCode::kInvalidArgument, "output letter 'i' repeats");
  expect_error("abcd,efgh,abcd,efgh->", {Shape{1, 1, 1, 1}, Shape{1, 1, 1, 1}, Shape{1, 1, 1, 1}, Shape{1, 1, 1, 1}},
               ErrorCode::kUnimplemented, "keeps 8 letters ('abcdefgh'), past the maximum rank 6");
  expect_error("...ij->ij", {Shape{2, 3}}, ErrorCode::kUnimplemented, "'...'");
}

}  // namespace
}  // namespace tandem::autograd
