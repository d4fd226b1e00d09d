// The CPU autocast kernels LibTorch 1.13 lacks for normalisation layers. See Note [Normalisation under
// CPU autocast].
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>
#include <torch/version.h>

#include "dtrain/config/Registry.h"

// Note [Normalisation under CPU autocast]
// Under bf16 autocast a Linear or convolution hands the next layer bfloat16, while a LayerNorm's or
// GroupNorm's weight and bias stay float32. PyTorch 2.x's CPU kernels take that mix (layer_norm from
// 2.0, group_norm from 2.1): they compute in float32 and return the input's dtype, bfloat16. LibTorch
// 1.13's refuse it ("expected scalar type BFloat16 but found Float"), and its autocast leaves both ops
// alone, so a model of one's own whose Linear feeds a torch::nn::LayerNorm failed at its first bf16
// step. Where the version lacks the mixed kernel, dtrain registers its own kernel for the op under the
// AutocastCPU dispatch key, the key autocast's own casts live under: a bfloat16 input with a float32
// weight or bias is normalised in float32 (the input widened exactly) and the result rounded to
// bfloat16, what 2.x's mixed kernel computes; any other input goes to the op unchanged. Autograd sees
// the two casts and the float32 op, so the gradient is computed in float32 and reaches the input
// rounded to bfloat16, as 2.x's mixed backward returns it. Softmax, log_softmax, GELU and the other
// activations run in bfloat16 and the losses in float32 on 1.13 as on 2.x (autocast's float32 list);
// tests/optim/AutocastCpuKernelsTest.cpp checks each dtype.
#define DTRAIN_MIXED_LAYER_NORM_KERNEL (TORCH_VERSION_MAJOR < 2)
#define DTRAIN_MIXED_GROUP_NORM_KERNEL \
  (TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 1))

#if DTRAIN_MIXED_LAYER_NORM_KERNEL || DTRAIN_MIXED_GROUP_NORM_KERNEL
namespace {

bool float32(const c10::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() && t->scalar_type() == at::kFloat;
}

// A reduced-precision input beside a float32 weight or bias.
bool mixed(const at::Tensor& input, const c10::optional<at::Tensor>& weight,
           const c10::optional<at::Tensor>& bias) {
  return input.scalar_type() == at::kBFloat16 && (float32(weight) || float32(bias));
}

}  // namespace
#endif

#if DTRAIN_MIXED_LAYER_NORM_KERNEL
namespace {

at::Tensor layer_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                      const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
                      double eps, bool cudnn_enable) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  if (!mixed(input, weight, bias))
    return at::layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable);
  return at::layer_norm(input.to(at::kFloat), normalized_shape, weight, bias, eps, cudnn_enable)
      .to(input.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutocastCPU, m) {
  m.impl("layer_norm", TORCH_FN(layer_norm));
}
#endif

#if DTRAIN_MIXED_GROUP_NORM_KERNEL
namespace {

at::Tensor group_norm(const at::Tensor& input, std::int64_t groups, const c10::optional<at::Tensor>& weight,
                      const c10::optional<at::Tensor>& bias, double eps, bool cudnn_enabled) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  if (!mixed(input, weight, bias)) return at::group_norm(input, groups, weight, bias, eps, cudnn_enabled);
  return at::group_norm(input.to(at::kFloat), groups, weight, bias, eps, cudnn_enabled)
      .to(input.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutocastCPU, m) {
  m.impl("group_norm", TORCH_FN(group_norm));
}
#endif

DTRAIN_LINK_ANCHOR(dtrain_autocast_cpu_kernels);
