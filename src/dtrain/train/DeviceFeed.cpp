// See DeviceFeed.h, Note [Copying batches ahead].
#include "dtrain/train/DeviceFeed.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

namespace dtrain::train {

DeviceFeed::DeviceFeed(std::unique_ptr<StepFeed> feed, torch::Device device)
    : feed_(std::move(feed)), device_(device) {
  if (device_.is_cuda()) {
    c10::impl::VirtualGuardImpl impl(device_.type());
    side_ = impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
  }
}

void DeviceFeed::start_epoch(std::int64_t epoch, std::int64_t first_step,
                             const std::vector<torch::Tensor>* rest) {
  // A dropped copy may still be running on the side stream; its memory was allocated there and is
  // reused there, after it, so dropping it needs no wait.
  ahead_.reset();
  feed_->start_epoch(epoch, first_step, rest);
}

void DeviceFeed::copy_ahead() {
  Copy copy;
  copy.batch = feed_->next();
  if (copy.batch) {
    c10::StreamGuard on_side(*side_);
    copy.batch->inputs = copy.batch->inputs.to(device_, /*non_blocking=*/true);
    copy.batch->targets = copy.batch->targets.to(device_, /*non_blocking=*/true);
    copy.done = std::make_unique<c10::Event>(device_.type());
    copy.done->record(*side_);
  }
  ahead_ = std::move(copy);
}

std::optional<data::Batch> DeviceFeed::next() {
  if (!device_.is_cuda()) {
    auto batch = feed_->next();
    if (batch && !device_.is_cpu()) {
      batch->inputs = batch->inputs.to(device_);
      batch->targets = batch->targets.to(device_);
    }
    return batch;
  }
  if (!ahead_) copy_ahead();
  auto copy = std::move(*ahead_);
  ahead_.reset();
  if (!copy.batch) return std::nullopt;
  const c10::impl::VirtualGuardImpl impl(device_.type());
  const auto compute = impl.getStream(device_);
  copy.done->block(compute);
  copy.batch->inputs.record_stream(compute);
  copy.batch->targets.record_stream(compute);
  copy_ahead();
  return std::move(copy.batch);
}

}  // namespace dtrain::train
