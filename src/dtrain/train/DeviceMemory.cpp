// See DeviceMemory.h. The caching allocator's statistics are in LibTorch's CUDA headers, which only
// a LibTorch with CUDA has (DTRAIN_WITH_CUDA); without it no tensor lives on a GPU.
#include "dtrain/train/DeviceMemory.h"

#ifdef DTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace dtrain::train {

void reset_device_memory_peak(const torch::Device& device) {
#ifdef DTRAIN_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

std::optional<std::int64_t> device_memory_peak(const torch::Device& device) {
#ifdef DTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;  // StatType::AGGREGATE
  }
#endif
  return std::nullopt;
}

}  // namespace dtrain::train
