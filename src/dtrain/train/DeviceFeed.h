// The step's batches on the device the model trains on. On the CPU they are StepFeed's own. On a
// GPU the next step's batch is copied while this step computes.
//
// Note [Copying batches ahead]
// A batch made in pinned host memory (the loader's threads pin it) is copied to the GPU with
// non_blocking on a side stream as soon as the previous batch is handed out, so the copy of
// batch k+1 overlaps the computation of batch k, as PyTorch's DataLoader(pin_memory=True) with a
// CUDA-stream prefetcher does. Handing batch k+1 out, the compute stream waits for the copy's event
// (a wait on the device, not on the host), and record_stream tells the caching allocator that the
// compute stream uses the batch's memory, so it is not reused while kernels queued there may still
// read it. The copy from pinned memory keeps its source alive itself (the host allocator records
// the copy's stream). The streams and events are c10's device-generic ones, so this compiles
// against a LibTorch without CUDA, where it is never used.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dtrain/data/Batch.h"
#include "dtrain/train/StepFeed.h"

namespace dtrain::train {

class DeviceFeed {
 public:
  DeviceFeed(std::unique_ptr<StepFeed> feed, torch::Device device);

  std::int64_t steps_per_epoch() const { return feed_->steps_per_epoch(); }
  std::int64_t epoch_steps() const { return feed_->epoch_steps(); }
  // Begins `epoch` at step `first_step` of it (StepFeed::start_epoch); a batch copied ahead for the
  // old position is dropped.
  void start_epoch(std::int64_t epoch, std::int64_t first_step = 0,
                   const std::vector<torch::Tensor>* rest = nullptr);
  // The next step's batch on the device, or nothing at the epoch's end.
  std::optional<data::Batch> next();

 private:
  // Takes the next host batch and starts its copy (GPU only).
  void copy_ahead();

  std::unique_ptr<StepFeed> feed_;
  torch::Device device_;
  struct Copy {
    std::optional<data::Batch> batch;  // on the device; nothing at the epoch's end
    std::unique_ptr<c10::Event> done;  // recorded on the side stream after the copy
  };
  std::optional<Copy> ahead_;
  std::optional<c10::Stream> side_;  // the copies' stream (GPU only)
};

}  // namespace dtrain::train
