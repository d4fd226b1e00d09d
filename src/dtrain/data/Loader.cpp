// The prefetching loader; see Loader.h.
#include "dtrain/data/Loader.h"

namespace dtrain::data {

Loader::Loader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, LoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  TORCH_CHECK(dataset_ != nullptr, "Loader: expected a data set, found null");
  TORCH_CHECK(options_.threads >= 0, "data.loader_threads: expected >= 0, found ", options_.threads);
  TORCH_CHECK(options_.prefetch >= 0, "data.prefetch: expected >= 0, found ", options_.prefetch);
}

Loader::~Loader() {
  stop_workers();
}

Batch Loader::make_batch(std::int64_t batch) const {
  auto made = dataset_->get_batch(sampler_.batch_indices(order_, batch), sampler_.batch_seed(epoch_, batch));
  if (options_.pin_memory) {
    made.inputs = made.inputs.pin_memory();
    made.targets = made.targets.pin_memory();
  }
  return made;
}

void Loader::start_epoch(std::int64_t epoch, std::int64_t first_batch, const torch::Tensor& rest) {
  TORCH_CHECK(epoch >= 0, "Loader: epoch must be >= 0, found ", epoch);
  TORCH_CHECK(first_batch >= 0 && (rest.defined() || first_batch <= batches_per_epoch()),
              "Loader: resume batch ", first_batch, " outside 0..", batches_per_epoch(),
              " (batches per epoch); was the checkpoint written with another ",
              "batch size, world size or partition?");
  stop_workers();
  epoch_ = epoch;
  next_batch_ = first_batch;
  if (rest.defined()) {
    // The batches before first_batch are never made: their places in the order are filler.
    const auto b = sampler_.options().batch_size;
    order_ = torch::cat({torch::zeros({first_batch * b}, torch::kLong), rest.to(torch::kLong)});
    epoch_batches_ = first_batch + (rest.size(0) + b - 1) / b;
  } else {
    order_ = sampler_.epoch_order(epoch);
    epoch_batches_ = batches_per_epoch();
  }
  if (options_.threads == 0) return;
  stopping_ = false;
  next_to_make_ = first_batch;
  ready_.clear();
  for (int t = 0; t < options_.threads; ++t) workers_.emplace_back(&Loader::worker, this);
}

void Loader::worker() {
  const std::int64_t window = options_.threads + options_.prefetch;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] {
      return stopping_ || next_to_make_ >= epoch_batches_ || next_to_make_ < next_batch_ + window;
    });
    if (stopping_ || next_to_make_ >= epoch_batches_) return;
    const std::int64_t batch = next_to_make_++;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = make_batch(batch);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    ready_.emplace(batch, std::move(slot));
    changed_.notify_all();
  }
}

std::optional<Batch> Loader::next() {
  TORCH_CHECK(order_.defined(), "Loader: call start_epoch() before next()");
  if (next_batch_ >= epoch_batches_) {
    stop_workers();
    return std::nullopt;
  }
  if (workers_.empty()) return make_batch(next_batch_++);
  Slot slot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return ready_.count(next_batch_) > 0; });
    auto it = ready_.find(next_batch_);
    slot = std::move(it->second);
    ready_.erase(it);
    ++next_batch_;
  }
  changed_.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
  ready_.clear();
}

}  // namespace dtrain::data
