// The bucketed gradient all-reduce behind DataParallel. See Note [Bucket launch order] and
// Note [Gradients as bucket views].
#include "dtrain/parallel/data_parallel/DataParallel.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "dtrain/parallel/GradientReadyHook.h"
#include "dtrain/parallel/ModuleSync.h"
#include "dtrain/parallel/data_parallel/GradientBuckets.h"
#include "dtrain/parallel/data_parallel/PowerSgd.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {

// Note [Bucket launch order]
// Collectives are matched by their position in each rank's sequence of calls, so every rank must
// launch the same buckets in the same order. Autograd may finish the buckets in a different order
// on different ranks (and a parameter unused on one rank never finishes there), so a complete
// bucket is launched only once every bucket before it has been; finish() launches the rest.
//
// Note [The last bucket is reduced in finish()]
// The last bucket to complete is ready at the very end of backward, when nothing is left to overlap
// with, so finish() reduces it with a blocking all-reduce on the caller's thread instead of
// launching it asynchronously from the hook: that spares a hand-off to the backend's progress or
// worker thread and back, which on busy cores costs more than the transfer (the mpi backend then
// uses MPI_Allreduce directly). For a model whose gradients fit in one bucket this is every step.
//
// Note [Gradients as bucket views]
// Each parameter's grad() is made an alias of its slot in the bucket's flat buffer. AccumulateGrad
// then adds into the bucket in place (backward runs with grad mode off), the all-reduce works on
// the gradients themselves, and finish() has nothing to copy back. When grad() is not the view
// (the first backward, or after zero_grad(set_to_none)), the hook copies it in once and re-points
// grad() at the slot, as DDP's gradient_as_bucket_view does.

std::string to_string(GradCompression compression) {
  return kGradCompressionNames.name(compression);
}

GradCompression parse_grad_compression(const std::string& name) {
  return kGradCompressionNames.parse(name, "gradient compression");
}

using detail::Bucket;
using detail::ParamSlot;
using util::Clock;

struct DataParallel::Impl {
  std::shared_ptr<torch::nn::Module> module;
  comm::CommunicatorPtr comm;
  DataParallelOptions options;
  std::vector<ParamSlot> params;
  std::vector<Bucket> buckets;
  // With compression powersgd; its rounds replace launch() once it is compressing.
  std::unique_ptr<detail::PowerSgd> powersgd;

  // Hooks run on the autograd engine's threads; finish() and set_sync() on the caller's.
  mutable std::mutex mutex;
  bool sync = true;
  std::size_t next_launch = 0;
  // Values carried in the last bucket's all-reduce: kMaxCarriedValues float slots after the last
  // bucket's gradients (or a buffer of their own with compression or no buckets).
  torch::Tensor carry_slots;
  std::int64_t carried = 0;  // values set for the current round
  torch::Tensor carried_result;
  SyncTiming timing;
  int launched_in_backward = 0;
  double contribution = 1.0;  // set_contribution()

  void build_buckets();
  void install_hooks();
  void remove_hooks();
  void on_gradient_ready(int index);
  void adopt_gradient(ParamSlot& slot);
  // From a hook every ready bucket but the last; from finish() all, the last one blocking. See
  // Note [The last bucket is reduced in finish()].
  void launch_ready_buckets(bool in_finish);
  void launch(Bucket& bucket, bool async_op);
  void reset_round();
  void wait_outstanding_quietly();
  bool carry_inline = false;  // carry_slots lie in the last bucket's buffer
};

void DataParallel::Impl::build_buckets() {
  auto layout = detail::build_buckets(*module, options, kMaxCarriedValues);
  params = std::move(layout.params);
  buckets = std::move(layout.buckets);
  carry_slots = layout.carry_slots;
  carry_inline = layout.carry_inline;
}

void DataParallel::Impl::install_hooks() {
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& slot = params[i];
    // The variable keeps only a weak reference to its accumulator: holding it here keeps the hook
    // alive for as long as this DataParallel.
    slot.accumulator = torch::autograd::impl::grad_accumulator(slot.param);
    TORCH_INTERNAL_ASSERT(slot.accumulator, "parameter '", slot.name, "' has no gradient accumulator");
    const int index = static_cast<int>(i);
    slot.hook_key = slot.accumulator->add_post_hook(
        std::make_unique<GradientReadyHook>([this, index] { on_gradient_ready(index); }));
  }
}

void DataParallel::Impl::remove_hooks() {
  for (auto& slot : params) {
    if (slot.accumulator) slot.accumulator->del_post_hook(slot.hook_key);
    slot.accumulator.reset();
  }
}

void DataParallel::Impl::adopt_gradient(ParamSlot& slot) {
  auto& grad = slot.param.mutable_grad();
  if (detail::is_view_of(grad, slot.view)) return;
  torch::NoGradGuard no_grad;
  if (grad.defined()) {
    slot.view.copy_(grad);
  } else {
    slot.view.zero_();
  }
  grad = slot.view;
}

void DataParallel::Impl::on_gradient_ready(int index) {
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = params[index];
  adopt_gradient(slot);
  if (!sync) return;
  if (slot.ready) {
    throw std::logic_error(
        fmt::format("[rank {}/{}] DataParallel: parameter '{}' received a second gradient before finish(); "
                    "call finish() after "
                    "every synchronised backward, and run the backwards of earlier micro-batches with sync "
                    "off (no_sync())",
                    comm->rank(), comm->size(), slot.name));
  }
  slot.ready = true;
  auto& bucket = buckets[slot.bucket];
  TORCH_INTERNAL_ASSERT(bucket.pending > 0, "bucket ", slot.bucket, " completed twice");
  if (--bucket.pending == 0) {
    const auto before = next_launch;
    launch_ready_buckets(/*in_finish=*/false);
    launched_in_backward += static_cast<int>(next_launch - before);
  }
}

void DataParallel::Impl::launch_ready_buckets(bool in_finish) {
  // See Note [Bucket launch order].
  const std::size_t limit = in_finish ? buckets.size() : buckets.size() - 1;
  while (next_launch < limit && buckets[next_launch].pending == 0) {
    const bool last = next_launch + 1 == buckets.size();
    launch(buckets[next_launch], /*async_op=*/!last);
    ++next_launch;
  }
}

void DataParallel::Impl::launch(Bucket& bucket, bool async_op) {
  if (powersgd && powersgd->compressing()) {
    powersgd->launch(static_cast<std::size_t>(&bucket - buckets.data()), async_op);
    return;
  }
  torch::NoGradGuard no_grad;
  const int n = comm->size();
  // The last bucket takes the carried values along when there are any.
  const bool with_carried = carry_inline && carried > 0 && &bucket == &buckets.back();
  auto& data = with_carried ? bucket.buffer : bucket.grads;
  // Dividing before the sum keeps 16-bit wire values in range, as DDP's compression hooks do.
  if (contribution != 1.0) data.mul_(contribution);  // See Note [Join]
  if (n > 1) data.div_(n);
  if (bucket.wire.defined()) {
    bucket.wire.copy_(data);
    bucket.work = comm->allreduce(bucket.wire, comm::ReduceOp::Sum, async_op);
  } else {
    bucket.work = comm->allreduce(data, comm::ReduceOp::Sum, async_op);
  }
}

void DataParallel::Impl::reset_round() {
  for (auto& slot : params) slot.ready = false;
  for (auto& bucket : buckets) {
    bucket.pending = static_cast<int>(bucket.params.size());
    bucket.work.reset();
  }
  next_launch = 0;
  launched_in_backward = 0;
  if (carried > 0) {
    torch::NoGradGuard no_grad;
    carry_slots.zero_();
    carried = 0;
  }
}

void DataParallel::Impl::wait_outstanding_quietly() {
  if (powersgd) powersgd->wait_quietly();
  for (auto& bucket : buckets) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();
    } catch (const std::exception&) {
      // Already failed; the buffers only need to outlive the backend's use of them.
    }
  }
}

DataParallel::DataParallel(std::shared_ptr<torch::nn::Module> module, comm::CommunicatorPtr comm,
                           DataParallelOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!module) throw std::invalid_argument("DataParallel: the module is null; pass the model to train");
  if (!comm)
    throw std::invalid_argument("DataParallel: the communicator is null; pass comm::connect(...)'s result");
  if (!(options.bucket_mb > 0)) {
    throw std::invalid_argument(fmt::format(
        "DataParallel: bucket_mb must be positive, got {}; 25 is PyTorch DDP's default", options.bucket_mb));
  }
  impl_->module = std::move(module);
  impl_->comm = std::move(comm);
  impl_->options = options;
  auto& c = *impl_->comm;
  if (options.check_same_module) verify_same_module(c, *impl_->module);
  const auto cap = static_cast<std::int64_t>(options.bucket_mb * 1024 * 1024);
  if (options.broadcast_initial_state) broadcast_coalesced(c, module_state(*impl_->module), /*root=*/0, cap);
  impl_->build_buckets();
  if (options.compression == GradCompression::PowerSgd) {
    impl_->powersgd = std::make_unique<detail::PowerSgd>(options.powersgd, impl_->params, impl_->buckets, c);
  }
  impl_->install_hooks();
}

DataParallel::~DataParallel() {
  if (!impl_) return;
  impl_->remove_hooks();
  impl_->wait_outstanding_quietly();
}

DataParallel::DataParallel(DataParallel&&) noexcept = default;
DataParallel& DataParallel::operator=(DataParallel&& other) noexcept {
  if (this != &other) {
    if (impl_) {
      impl_->remove_hooks();
      impl_->wait_outstanding_quietly();
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void DataParallel::finish() {
  auto& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.sync) return;
  const int in_backward = s.launched_in_backward;
  // Parameters that got no gradient still take part, so every rank launches every bucket.
  for (auto& slot : s.params) {
    if (slot.ready) continue;
    s.adopt_gradient(slot);
    slot.ready = true;
    --s.buckets[slot.bucket].pending;
  }
  // The last bucket's blocking all-reduce is communication time too.
  const auto start = Clock::now();
  try {
    s.launch_ready_buckets(/*in_finish=*/true);
    TORCH_INTERNAL_ASSERT(s.next_launch == s.buckets.size(), "not every bucket was launched");
    if (s.powersgd && s.powersgd->compressing()) {
      s.powersgd->finish();
    } else {
      for (auto& bucket : s.buckets) {
        bucket.work->wait();
        if (bucket.wire.defined()) {
          torch::NoGradGuard no_grad;
          bucket.grads.copy_(bucket.wire);
        }
      }
    }
    if (s.powersgd) s.powersgd->end_round();
  } catch (...) {
    s.wait_outstanding_quietly();
    s.reset_round();
    throw;
  }
  if (s.carried > 0) {
    torch::NoGradGuard no_grad;
    auto values = s.carry_slots.narrow(0, 0, s.carried).clone();
    if (!s.carry_inline && s.comm->size() > 1) {
      // Not in a bucket: an all-reduce of their own.
      if (s.contribution != 1.0) values.mul_(s.contribution);
      try {
        s.comm->allreduce(values, comm::ReduceOp::Sum);
      } catch (...) {
        s.reset_round();
        throw;
      }
      values.div_(s.comm->size());
    }
    s.carried_result = values;
  } else {
    s.carried_result = torch::Tensor();
  }
  s.timing.finish_wait_seconds = util::seconds_since(start);
  s.timing.buckets_launched_in_backward = in_backward;
  s.reset_round();
}

void DataParallel::set_contribution(double weight) {
  auto& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.powersgd && weight != 1.0) {
    throw std::invalid_argument(
        "DataParallel: a weighted contribution (data.equalize: join) does not work with compression "
        "powersgd");
  }
  s.contribution = weight;
}

void DataParallel::carry_values(const torch::Tensor& values) {
  auto& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.sync) {
    throw std::logic_error(
        "DataParallel: carry_values() with sync off; carry values in the backward that synchronises");
  }
  if (values.numel() > kMaxCarriedValues) {
    throw std::invalid_argument(fmt::format("DataParallel: carry_values() takes at most {} values, got {}",
                                            kMaxCarriedValues, values.numel()));
  }
  if (s.carry_inline && s.next_launch == s.buckets.size()) {
    throw std::logic_error(
        "DataParallel: carry_values() after the last bucket was launched; call it before backward");
  }
  torch::NoGradGuard no_grad;
  if (s.carried > values.numel()) s.carry_slots.zero_();
  s.carry_slots.narrow(0, 0, values.numel()).copy_(values.detach().reshape({-1}));
  s.carried = values.numel();
}

torch::Tensor DataParallel::carried_values() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->carried_result;
}

void DataParallel::set_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // Turning sync off halfway through a synchronised round would strand launched buckets.
  if (!enabled && impl_->sync) {
    for (const auto& slot : impl_->params) {
      if (slot.ready) {
        throw std::logic_error(
            "DataParallel: set_sync(false) after a synchronised backward; call finish() before turning sync "
            "off");
      }
    }
  }
  impl_->sync = enabled;
}

bool DataParallel::sync() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->sync;
}

DataParallel::NoSync::NoSync(DataParallel& dp) : dp_(dp), previous_(dp.sync()) {
  dp_.set_sync(false);
}
DataParallel::NoSync::~NoSync() {
  dp_.set_sync(previous_);
}

void DataParallel::sync_buffers() {
  std::vector<torch::Tensor> buffers = impl_->module->buffers(/*recurse=*/true);
  const auto cap = static_cast<std::int64_t>(impl_->options.bucket_mb * 1024 * 1024);
  broadcast_coalesced(*impl_->comm, buffers, /*root=*/0, cap);
}

std::map<std::string, torch::Tensor> DataParallel::compression_state() const {
  if (!impl_->powersgd) return {};
  return impl_->powersgd->state();
}

void DataParallel::load_compression_state(const std::map<std::string, torch::Tensor>& state) {
  if (state.empty()) return;
  if (!impl_->powersgd) {
    throw std::invalid_argument("DataParallel: compression state given, but compression is " +
                                to_string(impl_->options.compression));
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->powersgd->load_state(state);
}

DataParallel::CompressionSummary DataParallel::compression_summary() const {
  if (impl_->powersgd) return impl_->powersgd->summary();
  CompressionSummary s;
  for (const auto& bucket : impl_->buckets) {
    s.plain_tensors += static_cast<int>(bucket.params.size());
    s.elements += bucket.grads.numel();
  }
  s.sent_elements = s.elements;
  return s;
}

torch::nn::Module& DataParallel::module() {
  return *impl_->module;
}
const std::shared_ptr<torch::nn::Module>& DataParallel::module_ptr() const {
  return impl_->module;
}
comm::Communicator& DataParallel::communicator() {
  return *impl_->comm;
}
const DataParallelOptions& DataParallel::options() const {
  return impl_->options;
}

std::vector<std::vector<std::string>> DataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> names;
  for (const auto& bucket : impl_->buckets) {
    names.emplace_back();
    for (int i : bucket.params) names.back().push_back(impl_->params[i].name);
  }
  return names;
}

SyncTiming DataParallel::last_sync_timing() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->timing;
}

}  // namespace dtrain::parallel
