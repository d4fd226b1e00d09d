#include "dtrain/train/Trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "dtrain/data/Partition.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/optim/Optimizers.h"

namespace dtrain::train {
namespace {

// Serialises seeding and drawing from the process's default CPU generator while models are built.
std::mutex& process_generator_mutex() {
  static std::mutex mutex;
  return mutex;
}

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

models::InputSpec input_spec(const data::Dataset& train) {
  const auto shape = train.input_shape();
  if (shape.size() == 1) return models::InputSpec::tokens(train.num_classes(), shape[0]);
  TORCH_CHECK(shape.size() == 3, "data set '", train.name(), "' has input shape of rank ", shape.size(),
              "; expected (C, H, W) images or (T) token sequences");
  return models::InputSpec::image(shape[0], shape[1], shape[2], train.num_classes());
}

}  // namespace

std::string parameter_hash(const torch::nn::Module& module) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  auto mix = [&h](const void* data, std::size_t n) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= bytes[i];
      h *= 1099511628211ULL;
    }
  };
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    mix(name.data(), name.size());
    const auto c = t.detach().contiguous().cpu();
    mix(c.data_ptr(), c.numel() * c.element_size());
  };
  for (const auto& p : module.named_parameters(/*recurse=*/true)) add(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) add(b.key(), b.value());
  return fmt::format("{:016x}", h);
}

std::string data_partition_hash(int world, const config::DataConfig& data, const torch::Tensor& labels,
                                std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a 64 over every rank's indices, in rank order
  auto mix = [&h](const torch::Tensor& t) {
    const auto c = t.contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    const auto n = static_cast<std::size_t>(c.numel()) * c.element_size();
    for (std::size_t i = 0; i < n; ++i) {
      h ^= bytes[i];
      h *= 1099511628211ULL;
    }
  };
  const auto shards = data::partition_all(world, data::partition_options(data), labels, seed);
  for (const auto& shard : shards) {
    mix(shard.indices);
    if (shard.held_out.defined()) mix(shard.held_out);
  }
  return fmt::format("{:016x}", h);
}

Trainer::Trainer(config::RunConfig config, comm::CommunicatorPtr comm)
    : config_(std::move(config)), comm_(std::move(comm)) {
  if (config_.train.threads > 0) torch::set_num_threads(config_.train.threads);
  const int rank = comm_ ? comm_->rank() : 0;
  const int world = comm_ ? comm_->size() : 1;
  const auto seed = config_.train.seed;

  data_ = data::load_datasets(config_.data);
  shard_ = data::partition(rank, world, config_.data, data_.train->labels(), seed);
  partition_hash_ = train::data_partition_hash(world, config_.data, data_.train->labels(), seed);
  loader_ = data::make_train_loader(data_.train, shard_, config_.data, seed);
  if (loader_->batches_per_epoch() == 0) {
    throw std::invalid_argument(
        fmt::format("data: rank {} has {} training samples, fewer than one batch of data.batch_size {}; use "
                    "a smaller batch or "
                    "more data",
                    rank, shard_.size(), config_.data.batch_size));
  }

  // Every rank builds the same initial weights from the seed, so a run is reproducible even before
  // data_parallel broadcasts rank 0's copy. The generator is the process's: ranks that are threads
  // of one process (an in-process world) take turns, or one's draws would land in another's weights.
  {
    std::lock_guard<std::mutex> lock(process_generator_mutex());
    torch::manual_seed(seed);
    model_ = models::create_model(config_.model, input_spec(*data_.train));
  }
  initial_hash_ = parameter_hash(*model_);
  optimizer_ = optim::create_optimizer(model_->parameters(), config_.optim);
  scheduler_ = std::make_unique<optim::Scheduler>(config_.optim.scheduler, config_.optim.lr);
  loss_ = optim::create_loss(config_.optim.loss);
  auto model = model_;
  strategy_ = parallel::create_strategy(
      config_.parallel, model_, [model](const torch::Tensor& x) { return model->forward(x); }, comm_);

  const auto per_epoch = loader_->batches_per_epoch();
  total_steps_ = per_epoch * static_cast<std::int64_t>(config_.train.epochs);
  if (config_.train.max_steps > 0) total_steps_ = std::min(total_steps_, config_.train.max_steps);
  // Seed the dropout and other model randomness per rank after the broadcast, deterministically.
  std::lock_guard<std::mutex> lock(process_generator_mutex());
  torch::manual_seed(seed + 1000003ULL * static_cast<std::uint64_t>(rank + 1));
}

Trainer::~Trainer() = default;

int Trainer::rank() const {
  return comm_ ? comm_->rank() : 0;
}
int Trainer::world_size() const {
  return comm_ ? comm_->size() : 1;
}
std::int64_t Trainer::steps_per_epoch() const {
  return loader_->batches_per_epoch();
}

std::string Trainer::precision() const {
  for (const auto& p : model_->parameters()) {
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

std::int64_t Trainer::parameter_count() const {
  return models::parameter_count(*model_);
}

std::string Trainer::model_summary() const {
  return models::summary(*model_, input_spec(*data_.train));
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  callbacks_.push_back(std::move(callback));
}

void Trainer::request_stop(std::string reason) {
  stop_requested_ = true;
  if (stop_reason_.empty()) stop_reason_ = std::move(reason);
}

EvalMetrics Trainer::evaluate_on(const std::shared_ptr<const data::Dataset>& dataset,
                                 const torch::Tensor& indices) {
  torch::NoGradGuard no_grad;
  model_->eval();
  auto loader = data::make_eval_loader(dataset, config_.data, rank(), world_size(), indices);
  loader->start_epoch(0);
  MetricsAccumulator metrics(dataset->num_classes());
  while (auto batch = loader->next()) {
    const auto outputs = model_->forward(batch->inputs);
    const auto loss = loss_(outputs, batch->targets).item<double>();
    metrics.add(outputs, batch->targets, loss * static_cast<double>(batch->targets.numel()));
  }
  model_->train();
  if (comm_ && comm_->size() > 1) metrics.all_reduce(*comm_);
  return metrics.result();
}

EvalMetrics Trainer::evaluate() {
  if (shard_.held_out.defined() && shard_.held_out.numel() > 0)
    return evaluate_on(data_.train_plain, shard_.held_out);
  return evaluate_on(data_.test, {});
}

void Trainer::run_evaluation() {
  EvalEvent event;
  event.step = step_;
  event.epoch = epoch_;
  event.metrics = evaluate();
  last_eval_ = event.metrics;
  has_eval_ = true;
  last_eval_step_ = step_;
  for (auto& c : callbacks_) c->on_evaluation(*this, event);
}

TrainResult Trainer::fit() {
  TrainResult result;
  const int world = world_size();
  const auto per_epoch = loader_->batches_per_epoch();
  // Throughput skips the first steps: allocator warm-up, first-touch page faults, thread start.
  const std::int64_t warmup = std::min<std::int64_t>(10, std::max<std::int64_t>(1, total_steps_ / 10));
  std::int64_t timed_samples = 0;
  double timed_seconds = 0.0;

  model_->train();
  for (auto& c : callbacks_) c->on_train_begin(*this);

  while (step_ < total_steps_ && !stop_requested_) {
    loader_->start_epoch(epoch_, epoch_batch_);
    if (epoch_batch_ == 0 || !train_metrics_) train_metrics_.emplace(data_.train->num_classes());
    auto& train_metrics = *train_metrics_;
    double epoch_seconds = 0.0;
    bool epoch_done = true;
    auto t_prev = Clock::now();
    while (auto batch = loader_->next()) {
      StepEvent event;
      event.epoch = epoch_;
      event.batch = epoch_batch_;
      event.lr = scheduler_->apply(*optimizer_, step_, epoch_, total_steps_);
      auto r = strategy_->train_step(batch->inputs, batch->targets, loss_, *optimizer_);
      const auto t_now = Clock::now();
      ++step_;
      ++epoch_batch_;
      event.step = step_;
      event.loss = r.loss;
      event.samples = r.samples * world;
      event.step_seconds = seconds_between(t_prev, t_now);
      event.compute_seconds = r.compute_seconds;
      event.comm_wait_seconds = r.comm_wait_seconds;
      t_prev = t_now;
      if (r.outputs.defined()) {
        train_metrics.add(r.outputs, batch->targets, r.loss * static_cast<double>(batch->targets.numel()));
      }
      epoch_seconds += event.step_seconds;
      result.train_seconds += event.step_seconds;
      result.compute_seconds += r.compute_seconds;
      result.comm_wait_seconds += r.comm_wait_seconds;
      if (step_ > warmup) {
        timed_samples += event.samples;
        timed_seconds += event.step_seconds;
      }
      for (auto& c : callbacks_) c->on_step_end(*this, event);
      const bool eval_now = config_.train.eval_every_steps > 0 && step_ % config_.train.eval_every_steps == 0;
      if (eval_now) run_evaluation();
      if (step_ >= total_steps_ || stop_requested_) {
        epoch_done = epoch_batch_ >= per_epoch;
        break;
      }
      // Evaluation and callbacks are not training time.
      t_prev = Clock::now();
    }
    if (!epoch_done) break;
    EpochEvent ended;
    ended.epoch = epoch_;
    ended.step = step_;
    ended.seconds = epoch_seconds;
    if (comm_ && comm_->size() > 1) train_metrics.all_reduce(*comm_);
    ended.train = train_metrics.result();
    result.last_train = ended.train;
    ++epoch_;
    epoch_batch_ = 0;
    train_metrics_.reset();
    result.epochs_completed = epoch_;
    const int every = config_.train.eval_every_epochs;
    if (every > 0 && epoch_ % every == 0 && last_eval_step_ != step_) run_evaluation();
    for (auto& c : callbacks_) c->on_epoch_end(*this, ended);
  }

  if (last_eval_step_ != step_ || !has_eval_) run_evaluation();
  result.steps = step_;
  result.epochs_completed = epoch_;
  result.final_eval = last_eval_;
  result.samples_per_second = timed_seconds > 0 ? static_cast<double>(timed_samples) / timed_seconds : 0.0;
  result.comm = strategy_->comm_stats();
  result.stopped_early = stop_requested_;
  result.stop_reason = stop_reason_;
  for (auto& c : callbacks_) c->on_train_end(*this, result);
  return result;
}

void Trainer::save_state(io::Checkpoint& checkpoint) const {
  checkpoint.set_module_state("model", *model_);
  // The optimizer's own archive (momentum, Adam moments, L-BFGS history) travels as bytes.
  torch::serialize::OutputArchive optimizer_archive;
  optim::save_optimizer_state(*optimizer_, optimizer_archive, "optimizer");
  std::ostringstream optimizer_bytes;
  optimizer_archive.save_to(optimizer_bytes);
  const auto text = optimizer_bytes.str();
  checkpoint.set_tensor(
      "optimizer", torch::from_blob(const_cast<char*>(text.data()), {static_cast<std::int64_t>(text.size())},
                                    torch::kUInt8));
  // Each rank draws its own dropout masks, so each rank's generator is kept: gathered here, and
  // every rank restores its own on load.
  auto generator = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state().contiguous();
  }
  if (comm_ && comm_->size() > 1) {
    auto all = torch::empty({comm_->size() * state.numel()}, state.options());
    comm_->allgather(state, all);
    checkpoint.set_tensor("rng.cpu", all.view({comm_->size(), state.numel()}));
  } else {
    checkpoint.set_tensor("rng.cpu", state.view({1, state.numel()}));
  }
  // Note [Training metrics across a resume]
  // Within an epoch each rank holds its own counts of the batches so far. The checkpoint keeps
  // their sum; on resume rank 0 starts from that sum and the others from zero, so the reduction at
  // the epoch's end gives the same figures as an uninterrupted run, whatever the world size.
  if (epoch_batch_ > 0 && train_metrics_) {
    auto sums = train_metrics_->packed();
    if (comm_ && comm_->size() > 1) comm_->allreduce(sums, comm::ReduceOp::Sum);
    checkpoint.set_tensor("train_metrics", sums);
  }
  nlohmann::json meta;
  meta["step"] = step_;
  meta["epoch"] = epoch_;
  meta["epoch_batch"] = epoch_batch_;
  meta["world_size"] = world_size();
  meta["seed"] = config_.train.seed;
  meta["initial_parameter_hash"] = initial_hash_;
  meta["model"] = config_.model.name;
  checkpoint.set_metadata(meta);
}

void Trainer::load_state(const io::Checkpoint& checkpoint) {
  const auto meta = checkpoint.metadata();
  checkpoint.load_module_state("model", *model_);
  const auto bytes = checkpoint.tensor("optimizer").contiguous();
  std::istringstream optimizer_bytes(
      std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel())));
  torch::serialize::InputArchive optimizer_archive;
  optimizer_archive.load_from(optimizer_bytes);
  optim::load_optimizer_state(*optimizer_, optimizer_archive, "optimizer");
  const auto& rng = checkpoint.tensor("rng.cpu");
  const int saved_world = meta.value("world_size", 1);
  auto generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng[rank() % rng.size(0)].clone());
  }
  step_ = meta.at("step").get<std::int64_t>();
  epoch_ = meta.at("epoch").get<std::int64_t>();
  epoch_batch_ = meta.at("epoch_batch").get<std::int64_t>();
  if (saved_world != world_size()) {
    // Another world size cuts epochs into another number of batches: continue after the same
    // fraction of the epoch. Exact continuation needs the same world size.
    epoch_batch_ = epoch_batch_ * saved_world / world_size();
  }
  const auto per_epoch = loader_->batches_per_epoch();
  if (epoch_batch_ > per_epoch) {
    throw std::invalid_argument(
        fmt::format("checkpoint: position batch {} of epoch {} is past this run's {} batches per epoch; "
                    "resume with the same "
                    "data, batch size and number of workers",
                    epoch_batch_, epoch_, per_epoch));
  }
  last_eval_step_ = -1;
  train_metrics_.reset();
  if (epoch_batch_ > 0 && checkpoint.contains("train_metrics")) {
    train_metrics_.emplace(data_.train->num_classes());
    const auto& sums = checkpoint.tensor("train_metrics");
    const auto classes = data_.train->num_classes();
    if (sums.dim() != 1 || sums.numel() != classes * classes + 7) {
      throw io::CheckpointError(
          fmt::format("checkpoint: training metrics of {} values do not fit a data set "
                      "of {} classes; resume with the same data",
                      sums.numel(), classes));
    }
    if (rank() == 0) train_metrics_->load(sums);
  }
}

}  // namespace dtrain::train
