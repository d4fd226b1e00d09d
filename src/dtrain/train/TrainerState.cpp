// What a checkpoint holds of a Trainer beyond the strategy's part, and the fingerprints runs are
// compared by (initial parameters, data partition).
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "dtrain/data/Partition.h"
#include "dtrain/train/Trainer.h"
#include "dtrain/util/Hash.h"

namespace dtrain::train {
namespace {

void add_tensor(util::Fnv1a64& hash, const torch::Tensor& t) {
  const auto c = t.detach().contiguous().cpu();
  hash.add(c.data_ptr(), static_cast<std::size_t>(c.numel()) * c.element_size());
}

// Each rank draws its own dropout masks, so each rank's generator is kept: gathered here, and
// every rank restores its own on load. A GPU run draws them from its GPU's generator, kept beside
// the CPU's (the data pipeline's augmentations still draw on the CPU).
torch::Tensor gathered_generator_states(const comm::CommunicatorPtr& comm, at::Generator generator,
                                        bool gather) {
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state().contiguous();
  }
  if (!gather || !comm || comm->size() == 1) return state.view({1, state.numel()});
  auto all = torch::empty({comm->size() * state.numel()}, state.options());
  comm->allgather(state, all);
  return all.view({comm->size(), state.numel()});
}

void restore_generator_state(at::Generator generator, const torch::Tensor& states, int rank) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(states[rank % states.size(0)].clone());
}

at::Generator device_generator(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

}  // namespace

std::string parameter_hash(const torch::nn::Module& module) {
  util::Fnv1a64 hash;
  const auto* network = dynamic_cast<const models::Network*>(&module);
  if (network && network->deferred()) {
    // The parameters as an eager build holds them (in the same order: stage by stage), one stage
    // built at a time (Note [Deferred initialisation]).
    const auto children = network->layers()->named_children();
    network->for_each_built_stage([&](std::size_t stage, torch::nn::Module& built) {
      for (const auto& p : built.named_parameters(/*recurse=*/true)) {
        hash.add("layers." + children[stage].key() + "." + p.key());
        add_tensor(hash, p.value());
      }
    });
  } else {
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      hash.add(p.key());
      add_tensor(hash, p.value());
    }
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    hash.add(b.key());
    add_tensor(hash, b.value());
  }
  return hash.hex();
}

std::string data_partition_hash(int world, const config::DataConfig& data, const torch::Tensor& labels,
                                std::uint64_t seed) {
  util::Fnv1a64 hash;  // over every rank's indices, in rank order
  for (const auto& shard : data::partition_all(world, data::partition_options(data), labels, seed)) {
    add_tensor(hash, shard.indices);
    if (shard.held_out.defined()) add_tensor(hash, shard.held_out);
  }
  return hash.hex();
}

void Trainer::save_state(io::Checkpoint& checkpoint, bool gather) const {
  strategy_->save(checkpoint);
  checkpoint.set_tensor("rng.cpu",
                        gathered_generator_states(comm_, at::detail::getDefaultCPUGenerator(), gather));
  if (device_.is_cuda())
    checkpoint.set_tensor("rng.cuda", gathered_generator_states(comm_, device_generator(device_), gather));
  // Note [Training metrics across a resume]
  // Within an epoch each rank holds its own counts of the batches so far. The checkpoint keeps
  // their sum; on resume rank 0 starts from that sum and the others from zero, so the reduction at
  // the epoch's end gives the same figures as an uninterrupted run, whatever the world size.
  if (epoch_batch_ > 0 && train_metrics_) {
    auto sums = train_metrics_->packed();
    if (gather && comm_ && comm_->size() > 1) comm_->allreduce(sums, comm::ReduceOp::Sum);
    checkpoint.set_tensor("train_metrics", sums);
  }
  nlohmann::json meta;
  meta["step"] = step_;
  meta["epoch"] = epoch_;
  meta["epoch_batch"] = epoch_batch_;
  meta["data_holders"] = holders_;
  if (remainder_) {
    // Only whole steps come before the epoch's last, so the samples read are counted in them.
    const auto& p = remainder_->position;
    meta["epoch_remainder"] = {
        {"from_holders", p.from_holders},
        {"from_batch", p.from_batch},
        {"read", p.read + (epoch_batch_ - remainder_->first_batch) * holders_ * config_.data.batch_size}};
  }
  meta["world_size"] = world_size();
  meta["seed"] = config_.train.seed;
  meta["initial_parameter_hash"] = facts_.initial_hash;
  meta["model"] = config_.model.name;
  meta["strategy"] = strategy_->name();
  meta["optimizer"] = config_.optim.name;
  checkpoint.set_metadata(meta);
}

void Trainer::load_state(const io::Checkpoint& checkpoint) {
  const auto meta = checkpoint.metadata();
  const auto optimizer = meta.value("optimizer", config_.optim.name);
  if (optimizer != config_.optim.name) {
    throw io::CheckpointError(
        fmt::format("checkpoint: saved with optimizer {}, this run uses {}; resume with optim.name: {}",
                    optimizer, config_.optim.name, optimizer));
  }
  strategy_->load(checkpoint);
  restore_generator_state(at::detail::getDefaultCPUGenerator(), checkpoint.tensor("rng.cpu"), rank());
  if (device_.is_cuda() && checkpoint.contains("rng.cuda")) {
    restore_generator_state(device_generator(device_), checkpoint.tensor("rng.cuda"), rank());
  }
  step_ = meta.at("step").get<std::int64_t>();
  epoch_ = meta.at("epoch").get<std::int64_t>();
  epoch_batch_ = meta.at("epoch_batch").get<std::int64_t>();
  // Data holders are ranks, or graph nodes under a decentralized strategy (then the world size
  // may change and the epoch stays the same).
  const int saved_holders = meta.value("data_holders", meta.value("world_size", 1));
  remainder_.reset();
  if (meta.contains("epoch_remainder")) {
    const auto& r = meta.at("epoch_remainder");
    continue_epoch({r.at("from_holders").get<int>(), r.at("from_batch").get<std::int64_t>(),
                    r.at("read").get<std::int64_t>()},
                   saved_holders == holders_);
  } else if (saved_holders != holders_ && epoch_batch_ > 0) {
    continue_epoch({saved_holders, epoch_batch_, 0}, false);
  } else if (saved_holders != holders_) {
    step_ = epoch_ * steps_per_epoch();
  }
  const auto per_epoch = epoch_steps();
  if (epoch_batch_ > per_epoch) {
    throw std::invalid_argument(
        fmt::format("checkpoint: position batch {} of epoch {} is past this run's {} batches per epoch; "
                    "resume with the same data, batch size and number of workers",
                    epoch_batch_, epoch_, per_epoch));
  }
  // The run still ends after train.epochs epochs (or train.max_steps), counted from here.
  count_total_steps();
  if (config_.train.max_steps > 0 && config_.train.max_steps < step_) {
    throw std::invalid_argument(
        fmt::format("train.max_steps {} is below step {}, where the checkpoint resumes: the run would train "
                    "nothing; give train.max_steps above {} (or 0 to train to train.epochs)",
                    config_.train.max_steps, step_, step_));
  }
  last_eval_step_ = -1;
  train_metrics_.reset();
  if (epoch_batch_ > 0 && checkpoint.contains("train_metrics")) {
    train_metrics_.emplace(data_.train->num_classes(), language_model());
    const auto& sums = checkpoint.tensor("train_metrics");
    const auto classes = data_.train->num_classes();
    if (sums.dim() != 1 || sums.numel() != classes * classes + 7) {
      throw io::CheckpointError(
          fmt::format("checkpoint: training metrics of {} values do not fit a data set of {} classes; resume "
                      "with the same data",
                      sums.numel(), classes));
    }
    if (rank() == 0) train_metrics_->load(sums);
  }
}

void Trainer::continue_epoch(const data::RemainderPosition& position, bool same_holders) {
  if (strategy_->batches_per_step() != 1) {
    throw std::invalid_argument(
        fmt::format("checkpoint: saved within epoch {} by {} data holders; parallel.strategy {} continues "
                    "an epoch only on the same {} holders; resume from a checkpoint at an epoch's end",
                    epoch_ + 1, position.from_holders, strategy_->name(), position.from_holders));
  }
  const auto options = data::train_sampler_options(config_.data);
  const auto seed = config_.train.seed;
  const auto left =
      data::unread_samples(data::partition_all(position.from_holders, data::partition_options(config_.data),
                                               data_.train->labels(), seed),
                           options, seed, epoch_, position.from_batch);
  if (position.read < 0 || position.read > left.size(0)) {
    throw io::CheckpointError(
        fmt::format("checkpoint: {} samples read of the {} epoch {} had left after its first {} batches "
                    "on {} holders; resume with the same data, batch size and partition",
                    position.read, left.size(0), epoch_ + 1, position.from_batch, position.from_holders));
  }
  data::RemainderDeal deal(left.narrow(0, position.read, left.size(0) - position.read), holders_, options);
  EpochRemainder remainder;
  remainder.position = position;
  if (!same_holders) {
    // The epoch ends where it ends at this size, unless what is left needs more steps than that.
    epoch_batch_ = std::max<std::int64_t>(0, steps_per_epoch() - deal.steps());
    step_ = epoch_ * steps_per_epoch() + epoch_batch_;
  }
  remainder.first_batch = epoch_batch_;
  remainder.steps = epoch_batch_ + deal.steps();
  const int per_rank = holders_ / world_size();
  for (int h = 0; h < per_rank; ++h) remainder.rest.push_back(deal.indices(rank() * per_rank + h));
  if (join_) remainder.join.emplace(deal.sizes(), config_.data.batch_size, /*drop_last=*/false, epoch_batch_);
  remainder_ = std::move(remainder);
}

}  // namespace dtrain::train
