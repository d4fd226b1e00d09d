// See CudaGraphStep.h. The graph, streams and events are in LibTorch's CUDA headers, which only a
// LibTorch with CUDA has (DTRAIN_WITH_CUDA); without it check_cuda_graph() refuses the setting, so
// no CudaGraphStep is made.
#include "dtrain/train/CudaGraphStep.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <stdexcept>

#include "dtrain/optim/ForeachOptimizers.h"
#include "dtrain/optim/FusedKernels.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/ReplicaStrategy.h"

#ifdef DTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrain::train {

std::optional<std::string> cuda_graph_unavailable() {
#ifndef DTRAIN_WITH_CUDA
  return std::string("this dtrain was built against a LibTorch without CUDA");
#else
  if (!DTRAIN_HAS_FUSED_TENSOR_LR) {
    return fmt::format(
        "it needs LibTorch 2.6 or later (the fused optimizer steps that read their learning rate from the "
        "GPU); "
        "this dtrain was built against {}",
        TORCH_VERSION);
  }
  return std::nullopt;
#endif
}

void check_cuda_graph(const config::RunConfig& config, int world_size) {
  if (!config.train.cuda_graph) return;
  const auto refuse = [](const std::string& why) {
    throw std::invalid_argument("train.cuda_graph: true: " + why);
  };
  if (config.train.device != config::Device::Cuda) {
    refuse("a CUDA graph replays GPU kernels; set train.device: cuda (this run is on " +
           config::kDeviceNames.name(config.train.device) + ")");
  }
  if (!parallel::find_strategy(config.parallel.strategy).capabilities.cuda_graph) {
    const auto captured = parallel::strategies_that(
        [](const parallel::StrategyInfo& info) { return info.capabilities.cuda_graph; });
    refuse("only parallel.strategy: " + captured + "'s step is captured; " + config.parallel.strategy +
           "'s communication runs through dtrain's communicator, whose work on the host a replay would skip");
  }
  if (config.optim.name == "lbfgs") {
    refuse(
        "lbfgs evaluates the model again inside its step, as often as its line search needs, which a replay "
        "cannot; use optim.name: sgd, adam or adamw");
  }
  if (config.optim.foreach == config::AutoBool::False) {
    refuse(
        "the captured update is the optimizer's fused step; optim.foreach: false asks for the per-tensor "
        "one");
  }
  if (config.train.activation_checkpointing != config::ActivationCheckpointing::None) {
    refuse(
        "train.activation_checkpointing recomputes blocks in backward from the generators' state it saved on "
        "the host, which a replay would not restore; set it to none");
  }
  if (config.train.precision == config::Precision::Fp16 && world_size > 1) {
    refuse(
        "fp16 on several workers agrees on each skipped step with a collective, which a replay would skip; "
        "use one worker or train.precision: bf16");
  }
  if (const auto why = cuda_graph_unavailable()) refuse(*why);
}

#ifdef DTRAIN_WITH_CUDA

namespace {

torch::optim::Optimizer& replica_optimizer(parallel::Strategy& strategy) {
  auto* replica = dynamic_cast<parallel::ReplicaStrategy*>(&strategy);
  if (!replica)
    throw std::invalid_argument("train.cuda_graph: true: the strategy keeps no optimizer of its own");
  return replica->optimizer();
}

optim::FusedStep& fused_step(torch::optim::Optimizer& optimizer) {
  auto* fused = dynamic_cast<optim::FusedStep*>(&optimizer);
  if (!fused) throw std::invalid_argument("train.cuda_graph: true: the optimizer has no fused step");
  return *fused;
}

torch::Device parameters_device(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) return p.device();
  }
  throw std::invalid_argument("train.cuda_graph: true: the model has no parameters");
}

// A figure of the captured step, copied now: the next replay overwrites the captured tensor.
util::DeviceScalar copied(const util::DeviceScalar& figure) {
  return figure.pending() ? util::DeviceScalar::of(figure.as_tensor()) : figure;
}

bool same_layout(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.scalar_type() == b.scalar_type();
}

// Switches the autocast cast cache off for its lifetime (the casts are then recorded as kernels).
class NoAutocastCache {
 public:
  NoAutocastCache() : was_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~NoAutocastCache() { at::autocast::set_autocast_cache_enabled(was_); }
  NoAutocastCache(const NoAutocastCache&) = delete;
  NoAutocastCache& operator=(const NoAutocastCache&) = delete;

 private:
  bool was_;
};

}  // namespace

struct CudaGraphStep::Impl {
  explicit Impl(parallel::Strategy& s) : strategy(s), side(c10::cuda::getStreamFromPool()) {
    auto& optimizer = replica_optimizer(s);
    lr = torch::zeros({1}, torch::TensorOptions(torch::kFloat).device(parameters_device(optimizer)));
    fused_step(optimizer).set_lr_tensor(lr);
  }

  // `work` on the capture's stream, ordered after everything queued on the current stream before
  // it, and everything queued on the current stream after it ordered after `work`.
  template <class Work>
  void on_side_stream(const Work& work) {
    const auto current = c10::cuda::getCurrentCUDAStream();
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
      const c10::cuda::CUDAStreamGuard guard(side);
      work();
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(current);
  }

  void capture(const data::Batch& batch) {
    inputs = batch.inputs.clone();
    targets = batch.targets.clone();
    graph = std::make_unique<at::cuda::CUDAGraph>();
    const NoAutocastCache no_cache;
    on_side_stream([&] {
      graph->capture_begin();
      captured = strategy.train_step(data::Batch{inputs, targets});
      graph->capture_end();
    });
  }

  parallel::StepResult replay(const data::Batch& batch) {
    inputs.copy_(batch.inputs, /*non_blocking=*/true);
    targets.copy_(batch.targets, /*non_blocking=*/true);
    graph->replay();
    parallel::StepResult r;
    r.loss = copied(captured.loss);
    r.skipped = copied(captured.skipped);
    r.loss_scale = copied(captured.loss_scale);
    r.outputs = captured.outputs;  // read by the metrics before the next replay, on the same stream
    r.samples = captured.samples;
    r.closure_evaluations = captured.closure_evaluations;
    return r;
  }

  parallel::Strategy& strategy;
  c10::cuda::CUDAStream side;
  torch::Tensor lr, inputs, targets;
  int eager_steps = 0;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  parallel::StepResult captured;
};

CudaGraphStep::CudaGraphStep(parallel::Strategy& strategy) : impl_(std::make_unique<Impl>(strategy)) {}

parallel::StepResult CudaGraphStep::step(const data::Batch& batch, double lr) {
  auto& s = *impl_;
  s.lr.fill_(lr);
  if (!s.graph && s.eager_steps < kWarmupSteps) {
    ++s.eager_steps;
    parallel::StepResult r;
    s.on_side_stream([&] { r = s.strategy.train_step(batch); });
    return r;
  }
  if (!s.graph) s.capture(batch);
  if (!same_layout(batch.inputs, s.inputs) || !same_layout(batch.targets, s.targets)) {
    return s.strategy.train_step(batch);
  }
  return s.replay(batch);
}

#else

struct CudaGraphStep::Impl {};

CudaGraphStep::CudaGraphStep(parallel::Strategy&) {
  throw std::invalid_argument("train.cuda_graph: true: " + cuda_graph_unavailable().value_or(""));
}

parallel::StepResult CudaGraphStep::step(const data::Batch&, double) {
  throw std::logic_error("CudaGraphStep: no CUDA in this build");
}

#endif

CudaGraphStep::~CudaGraphStep() = default;

}  // namespace dtrain::train
