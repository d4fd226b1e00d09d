// at::_fused_sgd_, the one-kernel SGD step that can skip itself on a device-side overflow flag: in
// LibTorch from 2.3 on, absent from 1.13. DTRAIN_HAS_FUSED_SGD says which this build has, and
// DTRAIN_HAS_FUSED_SGD_TENSOR_LR whether it takes the learning rate as a tensor (the overload
// `.tensor_lr`, checked in 2.6's headers), which a CUDA graph needs to see a new rate each replay.
#pragma once

#include <torch/version.h>

#if __has_include(<ATen/ops/_fused_sgd.h>)
#include <ATen/ops/_fused_sgd.h>
#define DTRAIN_HAS_FUSED_SGD 1
#else
#define DTRAIN_HAS_FUSED_SGD 0
#endif

#if DTRAIN_HAS_FUSED_SGD && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6))
#define DTRAIN_HAS_FUSED_SGD_TENSOR_LR 1
#else
#define DTRAIN_HAS_FUSED_SGD_TENSOR_LR 0
#endif
