// Yields an epoch's batches in the sampler's order. With threads = 0 each batch is made on the
// caller's thread when asked for; with threads > 0 worker threads make batches ahead (at most
// threads + prefetch in flight) and hand them back in order, so both modes give the same batches.
#pragma once

#include "dtrain/data/Dataset.h"
#include "dtrain/data/Sampler.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace dtrain::data {

struct LoaderOptions {
  int threads = 0;   // 0 = batches made on the caller's thread
  int prefetch = 2;  // batches prepared ahead, beyond one per thread
  // Batches in page-locked host memory (made so by the thread that makes them), which a GPU copies
  // from asynchronously; needs a LibTorch with CUDA.
  bool pin_memory = false;
};

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, LoaderOptions options = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Begins `epoch` at batch `first_batch` (a checkpoint's position, to resume mid-epoch). `rest`,
  // when given, are the samples read from `first_batch` on instead of the sampler's, to the epoch's
  // end: an epoch across a size change (Note [An epoch across a size change]).
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0, const torch::Tensor& rest = {});
  // The next batch of the epoch, or nothing when the epoch is done.
  std::optional<Batch> next();
  // The epoch and the index of the batch next() returns next.
  SamplerPosition position() const { return {epoch_, next_batch_}; }

  std::int64_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }
  // The batches of the epoch begun last: batches_per_epoch(), or first_batch and those of `rest`.
  std::int64_t epoch_batches() const { return epoch_batches_; }
  const DistributedSampler& sampler() const { return sampler_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  Batch make_batch(std::int64_t batch) const;
  void worker();
  void stop_workers();

  std::shared_ptr<const Dataset> dataset_;
  DistributedSampler sampler_;
  LoaderOptions options_;

  std::int64_t epoch_ = 0;
  std::int64_t next_batch_ = 0;  // the consumer's position
  std::int64_t epoch_batches_ = 0;
  torch::Tensor order_;  // this epoch's sample order

  // Shared with the workers, under mutex_.
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::int64_t next_to_make_ = 0;
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  std::map<std::int64_t, Slot> ready_;
  std::vector<std::thread> workers_;
};

}  // namespace dtrain::data
