// The GPU memory a run used at its peak, as PyTorch reports it (torch.cuda.max_memory_allocated: the
// bytes of tensors the caching allocator handed out at once, not what it reserved from the driver),
// so results.json can be compared with a PyTorch run on the same GPU.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace dtrain::train {

// Starts the peak anew (torch.cuda.reset_peak_memory_stats); nothing for the CPU.
void reset_device_memory_peak(const torch::Device& device);
// The peak since the last reset on a GPU; nothing for the CPU.
std::optional<std::int64_t> device_memory_peak(const torch::Device& device);

}  // namespace dtrain::train
