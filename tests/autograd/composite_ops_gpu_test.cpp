// The composite ops (engine/autograd/composite.h) on CUDA against the CPU backend: values and
// gradients of stack, var and std, tril and triu, the MSE, L1, smooth L1, BCE-with-logits and KL losses,
// index_select, rms_norm, group_norm, conv1d, pad and einsum, where, gather, topk, clamp, cumsum and nll_loss, on the
// same random inputs; and the selection kernels' integer results (compare, cast, one_hot, argmax, topk)
// bit for bit. They add no kernel of their own; this holds their chains (and the new
// unary kernels under them) together on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/backend/ops.h"
#include "tests/autograd/autograd_test_util.h"
#include "tests/support/gpu.h"

namespace tandem::autograd {
namespace {

using tandem::testing::random_tensor;

Tensor gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

// The worst element's error relative to the largest |want| (a NaN fails).
double rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to(Device::cpu()).to_vector(), w = want.to(Device::cpu()).to_vector();
  EXPECT_EQ(g.size(), w.size());
  double diff = 0.0, scale = 1e-12;
  for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    const double d = std::abs(static_cast<double>(g[i]) - w[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::abs(static_cast<double>(w[i])));
  }
  return diff / scale;
}

using Fn = std::function<Variable(ExecutionContext&, const std::vector<Variable>&)>;

// f's value and its inputs' gradients for a unit upstream gradient of the summed output.
std::vector<Tensor> run(ExecutionContext& ctx, const Fn& f, const std::vector<Tensor>& inputs) {
  std::vector<Variable> vars;
  for (const Tensor& t : inputs) vars.emplace_back(ctx.device().is_cpu() ? t : gpu(t), true);
  Variable y = f(ctx, vars);
  sum(ctx, y).backward(&ctx);
  std::vector<Tensor> out{y.value()};
  for (Variable& v : vars) out.push_back(v.grad());
  return out;
}

void expect_match(const char* what, const Fn& f, const std::vector<Tensor>& inputs) {
  ExecutionContext cpu(Device::cpu(), 2, 1), cuda(Device::cuda(0));
  const std::vector<Tensor> want = run(cpu, f, inputs), got = run(cuda, f, inputs);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(rel_error(got[i], want[i]), 1e-5) << what << " output " << i;
}

TEST(CudaCompositeOps, MatchTheCpu) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  const Tensor a = random_tensor({5, 33}, 1, -2.0f, 2.0f), b = random_tensor({5, 33}, 2, -2.0f, 2.0f);
  const Tensor probs = random_tensor({5, 33}, 3, 0.0f, 1.0f);
  expect_match("stack", [](auto& ctx, const auto& v) { return stack(ctx, std::span<const Variable>(v), 1); }, {a, b});
  const int last[] = {-1};
  expect_match("var", [&](auto& ctx, const auto& v) { return var(ctx, v[0], last); }, {a});
  expect_match("std", [](auto& ctx, const auto& v) { return std(ctx, v[0]); }, {a});
  expect_match("tril", [](auto& ctx, const auto& v) { return tril(ctx, v[0], 2); }, {a});
  expect_match("triu", [](auto& ctx, const auto& v) { return triu(ctx, v[0], -1); }, {a});
  expect_match("mse_loss", [](auto& ctx, const auto& v) { return mse_loss(ctx, v[0], v[1]); }, {a, b});
  expect_match("l1_loss", [](auto& ctx, const auto& v) { return l1_loss(ctx, v[0], v[1]); }, {a, b});
  expect_match("smooth_l1_loss",
               [](auto& ctx, const auto& v) { return smooth_l1_loss(ctx, v[0], v[1], LossReduction::kMean, 0.5f); },
               {a, b});
  expect_match("bce_with_logits",
               [](auto& ctx, const auto& v) { return binary_cross_entropy_with_logits(ctx, v[0], v[1]); },
               {a, probs});
}

TEST(CudaCompositeOps, LayersAndEinsumMatchTheCpu) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  const Tensor x = random_tensor({2, 6, 3, 5}, 4, -2.0f, 2.0f), w = random_tensor({6}, 5, 0.5f, 1.5f);
  const Tensor b = random_tensor({6}, 6);
  Tensor index = Tensor::empty({4}, DType::kI64);
  const int64_t ids[] = {2, 0, 2, 4};
  for (int i = 0; i < 4; ++i) index.data<int64_t>()[i] = ids[i];
  expect_match("index_select", [&](auto& ctx, const auto& v) {
    return index_select(ctx, v[0], -1, ctx.device().is_cpu() ? index : index.to(ctx.device()));
  }, {x});
  expect_match("rms_norm", [](auto& ctx, const auto& v) { return rms_norm(ctx, v[0], 1, v[1]); },
               {random_tensor({4, 6}, 7), w});
  expect_match("group_norm", [](auto& ctx, const auto& v) { return group_norm(ctx, v[0], 3, v[1], v[2]); }, {x, w, b});
  const Conv1dParams p{2, 1, 2, 2};
  expect_match("conv1d", [&](auto& ctx, const auto& v) { return conv1d(ctx, v[0], v[1], v[2], p); },
               {random_tensor({2, 4, 11}, 8), random_tensor({6, 2, 3}, 9), b});
  const int64_t pads[] = {3, 2, 1, 1};
  for (PadMode mode : {PadMode::kConstant, PadMode::kReflect, PadMode::kReplicate, PadMode::kCircular}) {
    expect_match("pad", [&](auto& ctx, const auto& v) { return pad(ctx, v[0], pads, mode, 0.5f); }, {x});
  }
  expect_match("einsum", [](auto& ctx, const auto& v) { return einsum(ctx, "bhqd,bhkd->bhqk", v); },
               {random_tensor({2, 3, 5, 4}, 10), random_tensor({2, 3, 7, 4}, 11)});
  expect_match("kl_div", [](auto& ctx, const auto& v) { return kl_div(ctx, v[0], v[1], LossReduction::kBatchMean); },
               {random_tensor({5, 33}, 12, -3.0f, 0.0f), random_tensor({5, 33}, 13, 0.0f, 1.0f)});
}

TEST(CudaCompositeOps, SelectionMatchesTheCpu) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  const Tensor a = random_tensor({5, 33}, 14, -2.0f, 2.0f), b = random_tensor({33}, 15, -2.0f, 2.0f);
  Tensor cond = Tensor::empty({5, 1}, DType::kU8);
  for (int i = 0; i < 5; ++i) cond.data<uint8_t>()[i] = static_cast<uint8_t>(i % 2);
  expect_match("where", [&](auto& ctx, const auto& v) {
    return where(ctx, ctx.device().is_cpu() ? cond : cond.to(ctx.device()), v[0], v[1]);
  }, {a, b});
  expect_match("clamp", [](auto& ctx, const auto& v) { return clamp(ctx, v[0], -0.5f, 1.0f); }, {a});
  expect_match("cumsum", [](auto& ctx, const auto& v) { return cumsum(ctx, v[0], 1); }, {a});
  Tensor target = Tensor::empty({5}, DType::kI64);
  const int64_t t[] = {3, -100, 32, 0, 7};
  for (int i = 0; i < 5; ++i) target.data<int64_t>()[i] = t[i];
  expect_match("nll_loss", [&](auto& ctx, const auto& v) {
    return nll_loss(ctx, v[0], ctx.device().is_cpu() ? target : target.to(ctx.device()));
  }, {a});
  Tensor picks = Tensor::empty({5, 6}, DType::kI64);
  for (int i = 0; i < 30; ++i) picks.data<int64_t>()[i] = (i * 7) % 33;
  expect_match("gather", [&](auto& ctx, const auto& v) {
    return gather(ctx, v[0], 1, ctx.device().is_cpu() ? picks : picks.to(ctx.device()));
  }, {a});
  // Integer results, bit for bit.
  ExecutionContext cpu(Device::cpu(), 2, 1), cuda(Device::cuda(0));
  auto same_bytes = [](const Tensor& got, const Tensor& want, const char* what) {
    const Tensor g = got.to(Device::cpu());
    ASSERT_EQ(g.dtype(), want.dtype()) << what;
    ASSERT_EQ(g.shape(), want.shape()) << what;
    EXPECT_EQ(std::memcmp(g.raw_data(), want.raw_data(), static_cast<size_t>(want.numel()) * dtype_size(want.dtype())), 0)
        << what;
  };
  Tensor odd = a.clone();
  odd.data<float>()[3] = NAN;
  odd.data<float>()[40] = INFINITY;
  odd.data<float>()[41] = 3e19f;
  for (auto op : {backend::CompareOp::kEq, backend::CompareOp::kLt, backend::CompareOp::kGe}) {
    same_bytes(backend::compare(cuda, op, odd.to(cuda.device()), b.to(cuda.device())), backend::compare(cpu, op, odd, b),
               "compare");
  }
  same_bytes(backend::cast(cuda, odd.to(cuda.device()), DType::kI64), backend::cast(cpu, odd, DType::kI64), "cast");
  Tensor ids = Tensor::empty({3}, DType::kI64);
  for (int i = 0; i < 3; ++i) ids.data<int64_t>()[i] = t[2 + i];
  same_bytes(one_hot(cuda, ids.to(cuda.device()), 40), one_hot(cpu, ids, 40), "one_hot");
  same_bytes(argmax(cuda, Variable(odd.to(cuda.device())), 1), argmax(cpu, Variable(odd), 1), "argmax");
  for (bool largest : {true, false}) {
    same_bytes(topk(cuda, Variable(odd.to(cuda.device())), 7, 1, largest).indices, topk(cpu, Variable(odd), 7, 1, largest).indices,
               "topk");
  }
  // Rows longer than a block (1000 > 256 threads), with ties and NaN, and more rows than blocks (4100 > 4096).
  Tensor wide = random_tensor({4100, 1000}, 16, -2.0f, 2.0f);
  for (int64_t i = 0; i < wide.numel(); i += 97) wide.data<float>()[i] = 0.5f;
  for (int64_t i = 0; i < wide.numel(); i += 4999) wide.data<float>()[i] = NAN;
  same_bytes(topk(cuda, Variable(wide.to(cuda.device())), 9).indices, topk(cpu, Variable(wide), 9).indices,
             "topk of long rows");
  expect_match("topk values", [](auto& ctx, const auto& v) { return topk(ctx, v[0], 5, 0).values; }, {a});
}

}  // namespace
}  // namespace tandem::autograd
