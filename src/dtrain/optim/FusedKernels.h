// LibTorch's one-kernel optimizer steps and GradScaler's kernels, which can skip a step on an
// overflow flag that stays on the device: which this LibTorch has, and for which device.
//   DTRAIN_HAS_FUSED_SGD            at::_fused_sgd_ (from 2.3 on; absent from 1.13)
//   DTRAIN_HAS_FUSED_ADAM           at::_fused_adam_ and at::_fused_adamw_ (2.x; 1.13 has only the
//                                   first, and only on CUDA)
//   DTRAIN_HAS_FUSED_TENSOR_LR      the overloads of all three taking the learning rate as a tensor
//                                   (`.tensor_lr`, checked in 2.6's headers), which a CUDA graph needs
//                                   to see a new rate each replay
// Each runs on CUDA wherever it exists; on the CPU only where LibTorch registers a CPU kernel for it
// (2.4 on; the `*_cpu_dispatch.h` header says so), which `fused_on` answers.
#pragma once

#include <torch/types.h>
#include <torch/version.h>

#if __has_include(<ATen/ops/_fused_sgd.h>)
#include <ATen/ops/_fused_sgd.h>
#define DTRAIN_HAS_FUSED_SGD 1
#else
#define DTRAIN_HAS_FUSED_SGD 0
#endif

#if __has_include(<ATen/ops/_fused_adamw.h>)
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#define DTRAIN_HAS_FUSED_ADAM 1
#else
#define DTRAIN_HAS_FUSED_ADAM 0
#endif

#if DTRAIN_HAS_FUSED_SGD && DTRAIN_HAS_FUSED_ADAM && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6))
#define DTRAIN_HAS_FUSED_TENSOR_LR 1
#else
#define DTRAIN_HAS_FUSED_TENSOR_LR 0
#endif

#if __has_include(<ATen/ops/_fused_sgd_cpu_dispatch.h>)
#define DTRAIN_FUSED_SGD_ON_CPU 1
#else
#define DTRAIN_FUSED_SGD_ON_CPU 0
#endif
#if __has_include(<ATen/ops/_fused_adamw_cpu_dispatch.h>)
#define DTRAIN_FUSED_ADAM_ON_CPU 1
#else
#define DTRAIN_FUSED_ADAM_ON_CPU 0
#endif
#if __has_include(<ATen/ops/_amp_update_scale_cpu_dispatch.h>)
#define DTRAIN_AMP_KERNELS_ON_CPU 1
#else
#define DTRAIN_AMP_KERNELS_ON_CPU 0
#endif

namespace dtrain::optim {

enum class FusedKernel { Sgd, Adam, AmpScaler };

// Whether `kernel` runs on `device` in this LibTorch (GradScaler's kernels: always on CUDA).
inline bool fused_on(FusedKernel kernel, const torch::Device& device) {
  switch (kernel) {
    case FusedKernel::Sgd:
      return DTRAIN_HAS_FUSED_SGD && (device.is_cuda() || (device.is_cpu() && DTRAIN_FUSED_SGD_ON_CPU));
    case FusedKernel::Adam:
      return DTRAIN_HAS_FUSED_ADAM && (device.is_cuda() || (device.is_cpu() && DTRAIN_FUSED_ADAM_ON_CPU));
    case FusedKernel::AmpScaler:
      return device.is_cuda() || (device.is_cpu() && DTRAIN_AMP_KERNELS_ON_CPU);
  }
  return false;
}

}  // namespace dtrain::optim
