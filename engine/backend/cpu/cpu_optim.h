// The CPU optimizer kernels that cpu_backend.cpp puts in the KernelTable (contracts in kernels.h).
#pragma once

#include "engine/backend/kernels.h"

namespace tandem::backend::cpu {

void sgd_update(Ctx&, const SgdParams&, const Tensor* w, const Tensor* dw, const Tensor* v, const Tensor* w16,
                size_t count);
void adamw_update(Ctx&, const AdamWParams&, const Tensor* w, const Tensor* dw, const Tensor* m, const Tensor* v,
                  const Tensor* w16, size_t count);
void squared_norm(Ctx&, const Tensor* x, size_t count, Tensor& y);
void clip_by_global_norm(Ctx&, const Tensor* x, size_t count, const Tensor& squared_norm, double max_norm);

}  // namespace tandem::backend::cpu
