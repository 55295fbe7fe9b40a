// torch.einsum as permutes, reshapes, sums and batched matmuls of the tape (composite.h).
#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "engine/autograd/composite.h"

namespace tandem::autograd {
namespace {

// An operand with a letter per dimension.
struct Labelled {
  Variable x;
  std::string letters;
};

struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string checked_term(std::string_view equation, std::string_view term, bool output = false) {
  std::string letters;
  for (char c : term) {
    if (c == ' ') continue;
    TANDEM_CHECK(c != '.', ErrorCode::kUnimplemented, "einsum: '...' (broadcast dimensions) is not supported yet in '{}'",
                 equation);
    TANDEM_CHECK(is_letter(c), ErrorCode::kInvalidArgument,
                 "einsum: '{}' holds '{}'; subscripts are letters a-z and A-Z, operands split by ',' and '->'",
                 equation, c);
    TANDEM_CHECK(!output || letters.find(c) == std::string::npos, ErrorCode::kInvalidArgument,
                 "einsum: output letter '{}' repeats in '{}'", c, equation);
    TANDEM_CHECK(letters.find(c) == std::string::npos, ErrorCode::kUnimplemented,
                 "einsum: letter '{}' repeats in term '{}' of '{}' (a diagonal), which is not supported yet", c, term,
                 equation);
    letters.push_back(c);
  }
  return letters;
}

Equation parse(std::string_view equation) {
  Equation e;
  const size_t arrow = equation.find("->");
  const std::string_view lhs = equation.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(checked_term(equation, lhs.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string_view::npos) {
    e.output = checked_term(equation, equation.substr(arrow + 2), true);
    for (char c : e.output) {
      const bool found = std::any_of(e.inputs.begin(), e.inputs.end(),
                                     [c](const std::string& in) { return in.find(c) != std::string::npos; });
      TANDEM_CHECK(found, ErrorCode::kInvalidArgument, "einsum: output letter '{}' of '{}' is in no operand", c,
                   equation);
    }
    return e;
  }
  // Implicit output: the letters that appear once, in alphabetical (ASCII) order.
  std::map<char, int> count;
  for (const std::string& in : e.inputs) {
    for (char c : in) ++count[c];
  }
  for (const auto& [c, n] : count) {
    if (n == 1) e.output.push_back(c);
  }
  return e;
}

bool contains(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// x with its dimensions in the order of `letters` (a permutation of x's).
Labelled arrange(ExecutionContext& ctx, const Labelled& in, const std::string& letters) {
  if (letters == in.letters) return in;
  std::vector<int> order;
  for (char c : letters) order.push_back(static_cast<int>(in.letters.find(c)));
  return {permute(ctx, in.x, order), letters};
}

// in with the dimensions of the letters `keep` rejects summed away.
template <typename Keep>
Labelled sum_unless(ExecutionContext& ctx, const Labelled& in, Keep keep) {
  std::vector<int> dims;
  std::string kept;
  for (size_t k = 0; k < in.letters.size(); ++k) {
    if (keep(in.letters[k])) {
      kept.push_back(in.letters[k]);
    } else {
      dims.push_back(static_cast<int>(k));
    }
  }
  if (dims.empty()) return in;
  return {sum(ctx, in.x, dims, false), kept};
}

int64_t size_of(const Labelled& in, char c) { return in.x.shape()[static_cast<int>(in.letters.find(c))]; }

int64_t product(const Labelled& in, const std::string& letters) {
  int64_t n = 1;
  for (char c : letters) n *= size_of(in, c);
  return n;
}

// a and b contracted into the letters of `needed` they hold: one (batch, M, K) x (batch, K, N) matmul.
Labelled contract(ExecutionContext& ctx, Labelled a, Labelled b, const std::string& needed) {
  a = sum_unless(ctx, a, [&](char c) { return contains(b.letters, c) || contains(needed, c); });
  b = sum_unless(ctx, b, [&](char c) { return contains(a.letters, c) || contains(needed, c); });
  std::string batch, left, right, summed;
  for (char c : a.letters) {
    if (!contains(b.letters, c)) {
      left.push_back(c);
    } else {
      (contains(needed, c) ? batch : summed).push_back(c);
    }
  }
  for (char c : b.letters) {
    if (!contains(a.letters, c)) right.push_back(c);
  }
  const Labelled pa = arrange(ctx, a, batch + left + summed), pb = arrange(ctx, b, batch + summed + right);
  const int64_t nb = product(pa, batch), nk = product(pa, summed);
  const Variable ma = reshape(ctx, pa.x, {nb, product(pa, left), nk});
  const Variable mb = reshape(ctx, pb.x, {nb, nk, product(pb, right)});
  const std::string kept = batch + left + right;
  TANDEM_CHECK(static_cast<int>(kept.size()) <= Shape::kMaxRank, ErrorCode::kUnimplemented,
               "einsum: contracting '{}' with '{}' keeps {} letters ('{}'), past the maximum rank {}: put operands "
               "that share letters next to each other",
               a.letters, b.letters, kept.size(), kept, Shape::kMaxRank);
  std::vector<int64_t> dims;
  for (char c : batch + left) dims.push_back(size_of(pa, c));
  for (char c : right) dims.push_back(size_of(pb, c));
  return {reshape(ctx, matmul(ctx, ma, mb), std::span<const int64_t>(dims)), kept};
}

void check_operands(std::string_view equation, const Equation& e, std::span<const Variable> operands) {
  TANDEM_CHECK(e.inputs.size() == operands.size(), ErrorCode::kInvalidArgument,
               "einsum: '{}' names {} operands, but {} were given", equation, e.inputs.size(), operands.size());
  std::map<char, std::pair<int64_t, size_t>> sizes;  // letter -> (size, first operand)
  for (size_t i = 0; i < operands.size(); ++i) {
    const Shape s = operands[i].shape();
    TANDEM_CHECK(static_cast<size_t>(s.rank()) == e.inputs[i].size(), ErrorCode::kInvalidArgument,
                 "einsum: term '{}' of '{}' has {} letters, but operand {} has shape {}", e.inputs[i], equation,
                 e.inputs[i].size(), i, s.str());
    for (size_t k = 0; k < e.inputs[i].size(); ++k) {
      const auto [it, fresh] = sizes.try_emplace(e.inputs[i][k], s[static_cast<int>(k)], i);
      TANDEM_CHECK(fresh || it->second.first == s[static_cast<int>(k)], ErrorCode::kInvalidArgument,
                   "einsum: letter '{}' of '{}' has size {} in operand {} but {} in operand {}", e.inputs[i][k],
                   equation, it->second.first, it->second.second, s[static_cast<int>(k)], i);
    }
  }
}

}  // namespace

Variable einsum(ExecutionContext& ctx, std::string_view equation, std::span<const Variable> operands) {
  const Equation e = parse(equation);
  check_operands(equation, e, operands);
  // Needed after operand i: the output's letters and those of the operands after it.
  std::vector<std::string> needed_after(operands.size(), e.output);
  for (size_t i = operands.size() - 1; i > 0; --i) needed_after[i - 1] = needed_after[i] + e.inputs[i];
  Labelled current{operands[0], e.inputs[0]};
  current = sum_unless(ctx, current, [&](char c) { return contains(needed_after[0], c); });
  for (size_t i = 1; i < operands.size(); ++i) {
    current = contract(ctx, current, {operands[i], e.inputs[i]}, needed_after[i]);
  }
  return arrange(ctx, current, e.output).x;
}

}  // namespace tandem::autograd
