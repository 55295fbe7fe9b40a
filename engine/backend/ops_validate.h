// Argument checks shared by the entry points of ops.cpp. Each names the op, the argument and
// the shapes involved, so a mistake reads as what to change; none touches tensor data.
#pragma once

#include <string_view>

#include "engine/backend/kernels.h"

namespace tandem::backend::detail {

// t is defined, on ctx's device, of dtype and of rank (rank < 0: any). layout names the
// dimensions for the message, e.g. "(N, C, H, W)".
void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Ctx& ctx, DType dtype, int rank,
                  std::string_view layout);
// b has a's shape and memory format.
void check_same(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                const Tensor& b);
// b has a's memory format (4-D tensors whose shapes differ, e.g. x and dy of a convolution).
void check_same_format(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                       const Tensor& b);
// v is an f32 (n) vector on ctx's device, n being the count of `what` of ref_name, e.g.
// "gamma has shape [5] but x has 4 channels ([2, 4, 3, 3]); gamma must be (4)".
void check_vector(std::string_view op, std::string_view arg, const Tensor& v, const Ctx& ctx, int64_t n,
                  std::string_view what, std::string_view ref_name, const Shape& ref);
// A shape argument (x_shape, w_shape) of rank 4.
void check_shape4(std::string_view op, std::string_view arg, const Shape& s, std::string_view layout);

// The (N, K, P, Q) output of convolving x with w; checks the parameters, groups and channels.
Shape conv_output_shape(std::string_view op, const Conv2dParams& p, const Shape& x, std::string_view x_name,
                        const Shape& w, std::string_view w_name);
// The (N, C, P, Q) output of pooling x; checks the parameters.
Shape pool_output_shape(std::string_view op, const Pool2dParams& p, const Shape& x, std::string_view x_name);

// An output tensor on ctx's device.
inline Tensor like(const Ctx& ctx, const Shape& shape, MemoryFormat format, DType dtype = DType::kF32) {
  return Tensor::empty(shape, dtype, ctx.device(), format);
}

// The table of ctx's device.
const KernelTable& table(const Ctx& ctx);
// What an operand of a product (a convolution's or a linear layer's x and dy) may be: f32, or bf16
// where t is bf16 and the context computes in bf16 on a device that takes bf16 operands.
DType operand_dtype(const Ctx& ctx, const Tensor& t);
// Whether the context computes in bf16 on a device that keeps activations in bf16 between ops
// (KernelTable::from_bf16 and to_bf16 set).
bool keeps_bf16(const Ctx& ctx);
// f32, or bf16 where t is bf16 and the device keeps activations in bf16: what a batch norm's x (a
// convolution's bf16 output) and shortcut, relu_backward's y, the pooling ops' x and packed
// attention's qkv and y may be.
DType activation_dtype(const Ctx& ctx, const Tensor& t);
// x, widened to f32 where it is a bf16 activation: for the kernels that read f32 only.
Tensor widened(Ctx& ctx, const Tensor& x);
[[noreturn]] void throw_unimplemented(std::string_view op, const Ctx& ctx);

// The kernel entry, or Unimplemented naming the op and the device when the device lacks it.
template <typename Fn>
Fn entry(Fn fn, std::string_view op, const Ctx& ctx) {
  if (fn == nullptr) throw_unimplemented(op, ctx);
  return fn;
}

}  // namespace tandem::backend::detail
