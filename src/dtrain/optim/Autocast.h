// AutocastGuard: autocast for a scope (CPU or CUDA), the one place that knows how LibTorch spells it. 1.13
// has CPU-specific calls and no C++ guard; 2.4 replaced them with device-generic ones taking at::kCPU. See
// Note [Autocast across LibTorch versions].
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

namespace dtrain::optim {

// Note [Autocast across LibTorch versions]
// Autocast is thread-local state read by the dispatcher: while it is on, the ops PyTorch lists as
// lower-precision-safe (matmul, linear, convolutions) cast their floating inputs to the autocast
// dtype, and the ops that need range (reductions, losses) stay in float32. Parameters are never
// changed: they stay the float32 master weights, and autograd casts gradients back to them.
// Python's torch.autocast does four things we do by hand: remember the previous state, set
// enabled + dtype, count the nesting (the cast cache is cleared when the outermost scope ends),
// and restore. The calls:
//   LibTorch 1.13 .. 2.3: at::autocast::is_cpu_enabled / set_cpu_enabled,
//                         get_autocast_cpu_dtype / set_autocast_cpu_dtype
//   LibTorch >= 2.4:      at::autocast::is_autocast_enabled(at::kCPU) / set_autocast_enabled(at::kCPU, on),
//                         get_autocast_dtype(at::kCPU) / set_autocast_dtype(at::kCPU, dtype)
// increment_nesting, decrement_nesting and clear_cache are spelt alike in both. In 1.13 the CPU
// dtype must be bfloat16 (set_autocast_cpu_dtype throws for anything else: "AutocastCPU only
// support Bfloat16"), which is why fp16 is not autocast in dtrain (Note [fp16 numerics]).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DTRAIN_AUTOCAST_DEVICE_GENERIC 1
#else
#define DTRAIN_AUTOCAST_DEVICE_GENERIC 0
#endif

// On the CPU (device kCPU) or a GPU (kCUDA: 1.13 spells it is_enabled / set_enabled and
// get_autocast_gpu_dtype / set_autocast_gpu_dtype, and takes float16 there too).
inline bool autocast_enabled(at::DeviceType device = at::kCPU) {
#if DTRAIN_AUTOCAST_DEVICE_GENERIC
  return at::autocast::is_autocast_enabled(device);
#else
  return device == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline at::ScalarType autocast_dtype(at::DeviceType device = at::kCPU) {
#if DTRAIN_AUTOCAST_DEVICE_GENERIC
  return at::autocast::get_autocast_dtype(device);
#else
  return device == at::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                             : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline bool cpu_autocast_enabled() {
  return autocast_enabled(at::kCPU);
}

inline at::ScalarType cpu_autocast_dtype() {
  return autocast_dtype(at::kCPU);
}

// RAII: autocast to `dtype` on `device` (the CPU or CUDA, where the model's parameters live) while
// the guard lives (nothing when `enabled` is false); the previous state is restored, and the cast
// cache cleared when the outermost guard ends.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled, at::ScalarType dtype = at::kBFloat16, at::DeviceType device = at::kCPU)
      : active_(enabled), device_(device == at::kCUDA ? at::kCUDA : at::kCPU) {
    if (!active_) return;
    previous_enabled_ = autocast_enabled(device_);
    previous_dtype_ = autocast_dtype(device_);
    set(device_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set(device_, previous_enabled_, previous_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  static void set(at::DeviceType device, bool enabled, at::ScalarType dtype) {
#if DTRAIN_AUTOCAST_DEVICE_GENERIC
    at::autocast::set_autocast_enabled(device, enabled);
    at::autocast::set_autocast_dtype(device, dtype);
#else
    if (device == at::kCUDA) {
      at::autocast::set_enabled(enabled);
      at::autocast::set_autocast_gpu_dtype(dtype);
    } else {
      at::autocast::set_cpu_enabled(enabled);
      at::autocast::set_autocast_cpu_dtype(dtype);
    }
#endif
  }

  bool active_;
  at::DeviceType device_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

// RAII: autocast's cast cache off while the guard lives (spelt alike in 1.13 and 2.x). Autocast
// keeps the lower-precision copy of each float32 leaf it casts until the outermost scope ends;
// a forward run without a graph (models/Recompute.h) must not leave copies with no history for
// a later forward under the same scope to pick up.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : previous_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(previous_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool previous_;
};

}  // namespace dtrain::optim
