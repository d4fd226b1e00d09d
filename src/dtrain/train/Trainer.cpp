// The training loop: construction of data, model and strategy, the epochs, and evaluation.
// Checkpoint state is in TrainerState.cpp.
#include "dtrain/train/Trainer.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

#include "dtrain/data/Partition.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/models/Recompute.h"
#include "dtrain/optim/Optimizers.h"
#include "dtrain/parallel/MixedPrecision.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/train/CudaGraphStep.h"
#include "dtrain/train/DeviceMemory.h"
#include "dtrain/train/Transfer.h"
#include "dtrain/util/Allocator.h"
#include "dtrain/util/Clock.h"

namespace dtrain::train {
namespace {

using util::Clock;

// Serialises seeding and drawing from the process's default CPU generator while models are built.
std::mutex& process_generator_mutex() {
  return models::generator_mutex();
}

models::InputSpec input_spec(const data::Dataset& train) {
  const auto shape = train.input_shape();
  if (train.tokens()) {
    // A language model's classes are its vocabulary: the spec names no classes of its own then.
    auto spec = models::InputSpec::tokens(train.vocab_size(), shape.at(0),
                                          train.per_sample_labels() ? train.num_classes() : 0);
    spec.pad_id = train.pad_id();
    return spec;
  }
  models::InputSpec spec;
  spec.sample_shape = shape;
  spec.num_classes = train.num_classes();
  return spec;
}

std::string precision_of(const torch::nn::Module& module) {
  for (const auto& p : module.parameters()) {
    switch (p.scalar_type()) {
      case torch::kFloat:
        return "fp32";
      case torch::kDouble:
        return "fp64";
      case torch::kHalf:
        return "fp16";
      case torch::kBFloat16:
        return "bf16";
      default:
        return c10::toString(p.scalar_type());
    }
  }
  return "fp32";
}

// Note [Frozen parameters]
// A parameter frozen by model.freeze has requires_grad false: backward gives it no gradient,
// data_parallel leaves it out of its buckets and dAD out of its exchanges. The optimizer is not
// given it either, so no weight decay, momentum or L-BFGS direction can move it and its state is
// not saved; it stays bit-identical to the loaded value on every rank.
optim::OptimizerFactory trainable_only(optim::OptimizerFactory make) {
  return [make = std::move(make)](std::vector<torch::Tensor> parameters) {
    std::vector<torch::Tensor> trainable;
    for (auto& p : parameters) {
      if (p.requires_grad()) trainable.push_back(std::move(p));
    }
    return make(std::move(trainable));
  };
}

}  // namespace

void check_device(config::Device device) {
  if (device == config::Device::Cpu) return;
  if (!torch::cuda::is_available()) {
    throw std::invalid_argument("train.device: " + config::kDeviceNames.name(device) +
                                ": this LibTorch sees no CUDA device (torch::cuda::is_available() is false); "
                                "use train.device: cpu");
  }
}

bool apply_channels_last(models::Network& model, config::AutoBool setting, const torch::Device& device) {
  std::vector<torch::Tensor> four_d;
  for (auto& p : model.parameters()) {
    if (p.dim() == 4) four_d.push_back(p);
  }
  if (setting == config::AutoBool::True && four_d.empty()) {
    throw std::invalid_argument(
        "train.channels_last: true applies to a model with convolutions (4-D weights); " + model.kind() +
        " has none; remove it or set it to auto");
  }
  const bool on = setting == config::AutoBool::True ||
                  (setting == config::AutoBool::Auto && device.is_cuda() && !four_d.empty());
  if (!on) return false;
  torch::NoGradGuard no_grad;
  for (auto& p : four_d) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  model.set_channels_last(true);
  return true;
}

void check_device_settings(const config::TrainConfig& train) {
  check_device(train.device);
  if (train.device == config::Device::Cuda) return;
  if (train.cudnn_benchmark == config::AutoBool::True) {
    throw std::invalid_argument(
        "train.cudnn_benchmark: true applies to train.device: cuda (cuDNN's autotuner); remove it or set "
        "train.device: cuda");
  }
  if (train.float32_matmul_precision != config::MatmulPrecision::Highest) {
    throw std::invalid_argument("train.float32_matmul_precision: " +
                                config::kMatmulPrecisionNames.name(train.float32_matmul_precision) +
                                " (TF32) applies to train.device: cuda; remove it or set train.device: cuda");
  }
}

std::map<std::string, std::string> apply_device_settings(const config::TrainConfig& train,
                                                         const torch::Device& device) {
  if (!device.is_cuda()) return {};
  auto& context = at::globalContext();
  const bool benchmark = train.cudnn_benchmark != config::AutoBool::False;
  // torch's own names for the matrix products' precision are train.float32_matmul_precision's.
  const auto matmul = config::kMatmulPrecisionNames.name(train.float32_matmul_precision);
  context.setBenchmarkCuDNN(benchmark);
  context.setAllowTF32CuDNN(true);
  context.setFloat32MatmulPrecision(matmul);
  return {{"cudnn_benchmark", benchmark ? "true" : "false"},
          {"cudnn_allow_tf32", "true"},
          {"float32_matmul_precision", matmul}};
}

torch::Device resolve_device(config::Device device, int local_rank) {
  check_device(device);
  if (device == config::Device::Cpu) return torch::Device(torch::kCPU);
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::max(0, local_rank) % gpus));
}

namespace {

// The precision a run computes in (its parameters stay float32 master weights under bf16/fp16).
std::string computed_precision(config::Precision precision, const models::Network& model) {
  return precision == config::Precision::Fp32 ? precision_of(model) : config::kPrecisionNames.name(precision);
}

// Built and initialised on the CPU from the seed, then moved: a GPU run starts from the very
// weights a CPU run starts from.
void move_to_device(models::Network& model, const torch::Device& device) {
  if (model.deferred()) {
    // Only the buffers exist yet; the parameters are built where the strategy materializes them.
    model.set_device(device);
    torch::NoGradGuard no_grad;
    for (auto& b : model.buffers(/*recurse=*/true)) b.set_data(b.to(device));
  } else if (!device.is_cpu()) {
    model.to(device);
  }
}

// What the strategy plans to hold on this rank against what the host had before the model was
// built; refused when the host's ranks would not fit (parallel/MemoryPlan.h).
parallel::MemoryPlan plan_memory(const parallel::Strategy& strategy, const parallel::HostMemory& host,
                                 int local_world_size) {
  parallel::MemoryPlan plan;
  plan.state = strategy.planned_footprint();
  plan.before_model = host.resident;
  plan.available = host.available;
  plan.ranks_on_host = std::max(1, local_world_size);
  parallel::check_fits(plan, strategy.name());
  return plan;
}

}  // namespace

Trainer::Trainer(config::RunConfig config, comm::CommunicatorPtr comm, int local_rank, int local_world_size)
    : config_(std::move(config)), comm_(std::move(comm)) {
  check_device_settings(config_.train);
  check_cuda_graph(config_, comm_ ? comm_->size() : 1);
  device_ = resolve_device(config_.train.device, local_rank);
  facts_.device_settings = apply_device_settings(config_.train, device_);
  if (config_.train.threads > 0) torch::set_num_threads(config_.train.threads);
  const int rank = comm_ ? comm_->rank() : 0;
  const int world = comm_ ? comm_->size() : 1;
  const auto seed = config_.train.seed;

  data_ = data::load_datasets(config_.data);
  holders_ = parallel::data_holders(config_.parallel, world);
  const auto shards =
      data::partition_all(holders_, data::partition_options(config_.data), data_.train->labels(), seed);
  const int per_rank = holders_ / world;
  const std::vector<data::Shard> local(shards.begin() + rank * per_rank,
                                       shards.begin() + (rank + 1) * per_rank);
  shard_ = local.front();
  partition_hash_ = train::data_partition_hash(holders_, config_.data, data_.train->labels(), seed);

  const auto host = parallel::read_host_memory();
  // Every rank builds the same initial weights from the seed, so a run is reproducible even before
  // a strategy broadcasts rank 0's copy. The generator is the process's: ranks that are threads of
  // one process (an in-process world) take turns, or one's draws would land in another's weights.
  models::NetworkPtr model;
  {
    std::lock_guard<std::mutex> lock(process_generator_mutex());
    torch::manual_seed(seed);
    model = models::create_model(config_.model, input_spec(*data_.train));
  }
  // Transfer learning: the same file and patterns on every rank give every rank the same model
  // before the strategy broadcasts or copies it.
  facts_.transfer = apply_transfer(*model, config_.model).lines();
  models::apply_activation_checkpointing(*model, config_.train.activation_checkpointing,
                                         config_.train.activation_checkpointing_every);
  facts_.recomputation = models::describe_recomputation(*model, config_.train.activation_checkpointing);
  facts_.summary = models::summary(*model, input_spec(*data_.train));
  facts_.parameters = models::parameter_count(*model);
  facts_.precision = computed_precision(config_.train.precision, *model);
  facts_.initial_hash = parameter_hash(*model);
  move_to_device(*model, device_);
  facts_.channels_last = apply_channels_last(*model, config_.train.channels_last, device_);
  scheduler_ = std::make_unique<optim::Scheduler>(config_.optim.scheduler, config_.optim.lr);
  loss_ = optim::create_loss(config_.optim.loss);
  parallel::StrategyContext context{model, trainable_only(optim::optimizer_factory(config_.optim)), loss_,
                                    comm_, config_.parallel};
  context.holder_sizes = shard_.rank_sizes;
  context.loss_name = config_.optim.loss;
  context.seed = seed;
  context.precision = config_.train.precision;
  context.input = input_spec(*data_.train);
  context.local_world_size = local_world_size;
  // The probe builds a model whole; a deferred one (transformer, vit) runs in every precision.
  if (!model->deferred()) parallel::check_precision_runs(context.precision, *model, context.input);
  strategy_ = parallel::create_strategy(std::move(context));
  util::return_freed_memory();  // what building and cutting the model freed
  facts_.memory = plan_memory(*strategy_, host, local_world_size);
  if (config_.train.cuda_graph) graph_ = std::make_unique<CudaGraphStep>(*strategy_);
  feed_ = std::make_unique<DeviceFeed>(
      std::make_unique<StepFeed>(data_.train, local, config_.data, seed, strategy_->batches_per_step(),
                                 device_.is_cuda()),
      device_);
  set_up_join(world);
  const auto per_epoch = steps_per_epoch();
  if (per_epoch == 0) {
    throw std::invalid_argument(fmt::format(
        "data: {} has {} training samples, fewer than one step of {} batch(es) of data.batch_size {}; use a "
        "smaller batch or more data",
        holders_ == world ? fmt::format("rank {}", rank) : fmt::format("graph node {}", rank * per_rank),
        shard_.size(), strategy_->batches_per_step(), config_.data.batch_size));
  }
  count_total_steps();
  // Seed the dropout and other model randomness per rank after the broadcast, deterministically.
  std::lock_guard<std::mutex> lock(process_generator_mutex());
  // The ranks of a tensor-parallel group compute one model's forward together: they draw the same
  // masks, so the activations they all hold stay the same on each.
  const int tp = std::max(1, config_.parallel.mesh.tp);
  torch::manual_seed(seed + 1000003ULL * static_cast<std::uint64_t>(rank / tp + 1));
}

Trainer::~Trainer() = default;

void Trainer::set_up_join(int world) {
  if (config_.data.equalize != config::Equalize::Join || world <= 1) return;
  // See Note [Join] in parallel/Strategy.h.
  joinable_ = dynamic_cast<parallel::Joinable*>(strategy_.get());
  if (!joinable_ || holders_ != world || strategy_->batches_per_step() != 1) {
    throw std::invalid_argument(fmt::format(
        "data.equalize: join: parallel.strategy {} cannot run a step for a rank that has run out of data "
        "(data_parallel can); use data.equalize: pad or drop",
        strategy_->name()));
  }
  joinable_->check_joinable();
  join_.emplace(shard_.rank_sizes, config_.data.batch_size, config_.data.drop_last);
}

int Trainer::rank() const {
  return comm_ ? comm_->rank() : 0;
}
int Trainer::world_size() const {
  return comm_ ? comm_->size() : 1;
}
std::int64_t Trainer::steps_per_epoch() const {
  return join_ ? join_->steps_per_epoch() : feed_->steps_per_epoch();
}
std::int64_t Trainer::epoch_steps() const {
  return remainder_ ? remainder_->steps : steps_per_epoch();
}
void Trainer::count_total_steps() {
  // The rest of this epoch, then whole epochs to train.epochs; at most train.max_steps.
  total_steps_ = step_ + (epoch_steps() - epoch_batch_) +
                 (static_cast<std::int64_t>(config_.train.epochs) - epoch_ - 1) * steps_per_epoch();
  if (config_.train.max_steps > 0) total_steps_ = std::min(total_steps_, config_.train.max_steps);
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  callbacks_.push_back(std::move(callback));
}

void Trainer::request_stop(std::string reason) {
  stop_requested_ = true;
  if (stop_reason_.empty()) stop_reason_ = std::move(reason);
}

MetricsAccumulator Trainer::evaluate_model(std::size_t index, const parallel::EvalModel& model) {
  const bool held_out = shard_.held_out.defined() && shard_.held_out.numel() > 0;
  const auto& dataset = held_out ? data_.train_plain : data_.test;
  const torch::Tensor indices = held_out ? shard_.held_out : torch::Tensor();
  MetricsAccumulator metrics(dataset->num_classes(), language_model());
  // A model every rank holds is evaluated on each rank's share; one that lives on one rank, by
  // that rank on the whole set. Either way the sum over ranks is the model's figure.
  const bool shared = model.owner < 0;
  if (shared || model.owner == rank()) {
    auto loader = data::make_eval_loader(dataset, config_.data, shared ? rank() : 0,
                                         shared ? world_size() : 1, indices, device_.is_cuda());
    loader->start_epoch(0);
    while (auto batch = loader->next()) {
      const auto outputs = strategy_->eval_forward(index, batch->inputs.to(device_, /*non_blocking=*/true));
      if (!outputs.defined()) continue;
      torch::NoGradGuard no_grad;
      const auto loss = util::DeviceScalar::of(loss_(outputs, batch->targets.to(outputs.device())));
      metrics.add_mean(outputs, batch->targets, loss);
    }
  }
  return metrics;
}

Trainer::Evaluation Trainer::evaluate_all() {
  Evaluation evaluation;
  const auto models = strategy_->eval_models();
  strategy_->begin_evaluation();
  // Every model first, then the reductions: models that live on different ranks (graph nodes)
  // are evaluated at the same time rather than one rank after another.
  std::vector<MetricsAccumulator> sums;
  for (std::size_t i = 0; i < models.size(); ++i) sums.push_back(evaluate_model(i, models[i]));
  strategy_->end_evaluation();
  for (std::size_t i = 0; i < models.size(); ++i) {
    if (comm_ && comm_->size() > 1) sums[i].all_reduce(*comm_);
    evaluation.models.emplace_back(models[i].name, sums[i].result());
  }
  return evaluation;
}

EvalMetrics Trainer::evaluate() {
  return evaluate_all().models.front().second;
}

void Trainer::run_evaluation() {
  EvalEvent event;
  event.step = step_;
  // The epoch of the step it follows, from 1: within an epoch that epoch, at its end the one that ended.
  event.epoch = epoch_batch_ > 0 ? epoch_ + 1 : epoch_;
  auto evaluation = evaluate_all();
  event.metrics = evaluation.models.front().second;
  for (std::size_t i = 1; i < evaluation.models.size(); ++i) event.others.insert(evaluation.models[i]);
  event.strategy_metrics = strategy_->metrics();
  last_eval_ = event;
  has_eval_ = true;
  last_eval_step_ = step_;
  for (auto& c : callbacks_) c->on_evaluation(*this, event);
}

bool Trainer::train_epoch(TrainResult& result, std::int64_t warmup) {
  const auto per_epoch = epoch_steps();
  feed_->start_epoch(epoch_, epoch_batch_, remainder_ ? &remainder_->rest : nullptr);
  const JoinSchedule* join = remainder_ && remainder_->join ? &*remainder_->join : join_ ? &*join_ : nullptr;
  if (epoch_batch_ == 0 || !train_metrics_)
    train_metrics_.emplace(data_.train->num_classes(), language_model());
  double epoch_seconds = 0.0;
  auto t_prev = Clock::now();
  for (;;) {
    // Under join a rank that has run out keeps stepping (a shadow step) until the epoch's last.
    auto batch = feed_->next();
    if (join ? epoch_batch_ >= per_epoch : !batch) break;
    StepEvent event;
    event.epoch = epoch_;
    event.batch = epoch_batch_;
    event.lr = scheduler_->lr(step_, epoch_, total_steps_);
    strategy_->set_learning_rate(event.lr);
    const auto r = join ? joinable_->join_step(batch ? &*batch : nullptr, join->weight(rank(), epoch_batch_))
                   : graph_ ? graph_->step(*batch, event.lr)
                            : strategy_->train_step(*batch);
    // Where this step's figures will be read, wait for the device here, so that the wait counts
    // as training time (Note [Reading a step's figures]).
    if (r.loss.pending() && read_point(step_ + 1, epoch_batch_ + 1 >= per_epoch)) r.loss.value();
    const auto t_now = Clock::now();
    event.samples = join ? join->samples(epoch_batch_) : r.samples * world_size();
    event.step = ++step_;
    ++epoch_batch_;
    event.loss = r.loss;
    event.step_seconds = util::seconds_between(t_prev, t_now);
    event.timing = r.timing;
    event.bytes_sent = r.bytes_sent;
    event.skipped = r.skipped;
    event.loss_scale = r.loss_scale;
    if (batch && r.outputs.defined()) {
      train_metrics_->add_mean(r.outputs, batch->targets, r.loss);
    }
    epoch_seconds += event.step_seconds;
    result.train_seconds += event.step_seconds;
    result.steps_run += 1;
    result.step_time += r.timing;
    result.bytes_sent += r.bytes_sent;
    skipped_steps_.add(r.skipped);
    loss_scale_ = r.loss_scale;
    if (step_ > warmup) {
      timed_samples_ += event.samples;
      timed_seconds_ += event.step_seconds;
    }
    for (auto& c : callbacks_) c->on_step_end(*this, event);
    if (config_.train.eval_every_steps > 0 && step_ % config_.train.eval_every_steps == 0) run_evaluation();
    if (step_ >= total_steps_ || stop_requested_) {
      if (epoch_batch_ < per_epoch) return false;
      break;
    }
    // Evaluation and callbacks are not training time.
    t_prev = Clock::now();
  }
  end_epoch(result, epoch_seconds);
  return true;
}

bool Trainer::read_point(std::int64_t step, bool epoch_end) const {
  const auto& t = config_.train;
  const auto every = [step](std::int64_t n) { return n > 0 && step % n == 0; };
  return t.sync_every_step || epoch_end || step >= total_steps_ || stop_requested_ ||
         every(t.log_every_steps) || every(t.eval_every_steps) || every(t.checkpoint_every_steps);
}

void Trainer::end_epoch(TrainResult& result, double epoch_seconds) {
  EpochEvent ended;
  ended.epoch = epoch_;
  ended.step = step_;
  ended.seconds = epoch_seconds;
  if (comm_ && comm_->size() > 1) train_metrics_->all_reduce(*comm_);
  ended.train = train_metrics_->result();
  result.last_train = ended.train;
  ++epoch_;
  epoch_batch_ = 0;
  remainder_.reset();
  train_metrics_.reset();
  result.epochs_completed = epoch_;
  const int every = config_.train.eval_every_epochs;
  if (every > 0 && epoch_ % every == 0 && last_eval_step_ != step_) run_evaluation();
  for (auto& c : callbacks_) c->on_epoch_end(*this, ended);
}

TrainResult Trainer::fit() {
  TrainResult result;
  // Throughput skips the first steps: allocator warm-up, first-touch page faults, thread start.
  const std::int64_t warmup = std::min<std::int64_t>(10, std::max<std::int64_t>(1, total_steps_ / 10));
  timed_samples_ = 0;
  timed_seconds_ = 0.0;
  skipped_steps_ = {};
  loss_scale_ = 0.0;
  reset_device_memory_peak(device_);
  for (auto& c : callbacks_) c->on_train_begin(*this);
  if (config_.train.eval_at_start && step_ == 0 && !has_eval_) run_evaluation();
  while (step_ < total_steps_ && !stop_requested_) {
    if (!train_epoch(result, warmup)) break;
  }
  if (last_eval_step_ != step_ || !has_eval_) run_evaluation();
  result.steps = step_;
  result.epochs_completed = epoch_;
  result.epochs_reached = epoch_batch_ > 0 ? epoch_ + 1 : epoch_;
  result.skipped_steps = std::llround(skipped_steps_.take());
  result.loss_scale = loss_scale_;
  result.final_eval = last_eval_.metrics;
  result.final_others = last_eval_.others;
  result.final_strategy_metrics = last_eval_.strategy_metrics;
  result.samples_per_second = timed_seconds_ > 0 ? static_cast<double>(timed_samples_) / timed_seconds_ : 0.0;
  result.comm = strategy_->comm_stats();
  result.strategy_notes = strategy_->notes();
  result.stopped_early = stop_requested_;
  result.stop_reason = stop_reason_;
  result.gpu_memory_peak_bytes = device_memory_peak(device_).value_or(0);
  for (auto& c : callbacks_) c->on_train_end(*this, result);
  return result;
}

}  // namespace dtrain::train
