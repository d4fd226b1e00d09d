// Trainer: epochs or a step budget over one strategy, evaluation every n steps or epochs with
// metrics reduced over ranks, a learning-rate schedule, and everything else as callbacks. It is
// the same code for every strategy and for one process or many; given a seed, two runs give
// identical numbers, and a run resumed from a checkpoint continues exactly.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/Loader.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/Network.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/optim/Scheduler.h"
#include "dtrain/parallel/Strategy.h"
#include "dtrain/train/Callback.h"
#include "dtrain/train/Metrics.h"

namespace dtrain::train {

class Trainer {
 public:
  // Builds data, model, optimizer, schedule and strategy from `config`. `comm` may be null for a
  // single process with strategy local. The model is initialised from config.train.seed on every
  // rank (and data_parallel broadcasts rank 0's weights anyway).
  Trainer(config::RunConfig config, comm::CommunicatorPtr comm);
  ~Trainer();

  void add_callback(std::shared_ptr<Callback> callback);

  // Trains from the current position (0, or where a loaded checkpoint left off) to the end.
  TrainResult fit();
  // Evaluates on the test set (kfold: the held-out fold), every rank on its share; reduced.
  EvalMetrics evaluate();
  // Asks the loop to stop after the current step; every rank must ask at the same step (decide
  // from reduced figures only), or the ranks fall out of step.
  void request_stop(std::string reason);

  // The position and everything needed to continue exactly: model, optimizer, random state, step,
  // epoch and the sampler's position. load_state() expects a Trainer built from the same config.
  // save_state is collective (it gathers every rank's random state): call it on every rank.
  void save_state(io::Checkpoint& checkpoint) const;
  void load_state(const io::Checkpoint& checkpoint);

  const config::RunConfig& config() const { return config_; }
  int rank() const;
  int world_size() const;
  std::int64_t step() const { return step_; }
  std::int64_t epoch() const { return epoch_; }
  std::int64_t total_steps() const { return total_steps_; }
  std::int64_t steps_per_epoch() const;
  models::Network& model() { return *model_; }
  const models::NetworkPtr& model_ptr() const { return model_; }
  parallel::Strategy& strategy() { return *strategy_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const data::DataSets& datasets() const { return data_; }
  const comm::CommunicatorPtr& communicator() const { return comm_; }
  // A one-line description of the model and its parameter count.
  std::string model_summary() const;
  std::int64_t parameter_count() const;
  // Hash of the model's parameters as built (before any training): equal across runs with the
  // same seed and model, which experiments check.
  std::string initial_parameter_hash() const { return initial_hash_; }
  // The parameters' floating-point type: "fp32", "fp64", "fp16" or "bf16".
  std::string precision() const;
  // Which training samples each rank holds (data_partition_hash).
  std::string data_partition_hash() const { return partition_hash_; }

 private:
  EvalMetrics evaluate_on(const std::shared_ptr<const data::Dataset>& dataset, const torch::Tensor& indices);
  void run_evaluation();

  config::RunConfig config_;
  comm::CommunicatorPtr comm_;
  data::DataSets data_;
  data::Shard shard_;
  std::unique_ptr<data::Loader> loader_;
  models::NetworkPtr model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Scheduler> scheduler_;
  optim::LossFn loss_;
  std::unique_ptr<parallel::Strategy> strategy_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::string initial_hash_;
  std::string partition_hash_;

  std::int64_t step_ = 0;
  std::int64_t epoch_ = 0;        // the epoch in progress (or next to start)
  std::int64_t epoch_batch_ = 0;  // the next batch of epoch_
  // The training metrics of epoch_ so far; a checkpoint within an epoch keeps their sum over ranks,
  // so that a resumed run reports the whole epoch (Note [Training metrics across a resume]).
  std::optional<MetricsAccumulator> train_metrics_;
  std::int64_t total_steps_ = 0;
  bool stop_requested_ = false;
  std::string stop_reason_;
  EvalMetrics last_eval_;
  bool has_eval_ = false;
  std::int64_t last_eval_step_ = -1;
};

// Hex digest (FNV-1a 64) of a module's parameters and buffers, in registration order.
std::string parameter_hash(const torch::nn::Module& module);

// A hash of every rank's shard of the training set (indices and held-out fold, in rank order): two
// runs with equal hashes trained each rank on the same samples.
std::string data_partition_hash(int world, const config::DataConfig& data, const torch::Tensor& labels,
                                std::uint64_t seed);

}  // namespace dtrain::train
