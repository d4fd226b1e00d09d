// Trainer: epochs or a step budget over one strategy, evaluation every n steps or epochs with
// metrics reduced over ranks, a learning-rate schedule, and everything else as callbacks. It
// builds the data, the model and the strategy, and then talks to the strategy only through the
// parallel::Strategy contract, so it is the same code for every strategy and for one process or
// many; given a seed, two runs give identical numbers, and a resumed run continues exactly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/data/EpochRemainder.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/Loader.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/Network.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/optim/Scheduler.h"
#include "dtrain/parallel/MemoryPlan.h"
#include "dtrain/parallel/Strategy.h"
#include "dtrain/train/Callback.h"
#include "dtrain/train/CudaGraphStep.h"
#include "dtrain/train/DeviceFeed.h"
#include "dtrain/train/JoinSchedule.h"
#include "dtrain/train/Metrics.h"
#include "dtrain/train/StepFeed.h"
#include "dtrain/util/DeviceScalar.h"

namespace dtrain::train {

// What the trainer learnt about the model as built, before the strategy took it over (a sharded
// strategy may no longer hold it whole).
struct ModelFacts {
  std::string summary;          // "lenet5: 61,706 parameters in 12 stages, ..."
  std::int64_t parameters = 0;  // scalar parameters
  std::string precision;        // "fp32", "fp64", "fp16" or "bf16"
  std::string initial_hash;     // of the parameters and buffers as built; equal for equal seeds
  // What model.init_from loaded and model.freeze froze, one line each for the log (Transfer.h).
  std::vector<std::string> transfer;
  // On a GPU: cuDNN's autotuner and TF32 as set for the run (apply_device_settings); empty on the CPU.
  std::map<std::string, std::string> device_settings;
  bool channels_last = false;  // train.channels_last as applied (apply_channels_last)
  // train.activation_checkpointing as applied, for the log: "activation checkpointing: full, 6 of 6
  // blocks recomputed (stages 1-6)"; empty with none.
  std::string recomputation;
  // The model state this rank's strategy plans to hold, checked against the host (MemoryPlan.h);
  // its state is all zero where the strategy predicts nothing.
  parallel::MemoryPlan memory;
};

class Trainer {
 public:
  // Builds data, model, schedule and strategy from `config`. `comm` may be null for a single
  // process with a strategy that needs none. The model is initialised from config.train.seed on
  // every rank (and strategies that replicate it broadcast rank 0's weights anyway).
  // train.device: cuda trains on GPU local_rank modulo the GPUs this process sees (resolve_device).
  // local_world_size: the ranks on this host as the launcher said (0: not said), for strategies that
  // group ranks by host.
  Trainer(config::RunConfig config, comm::CommunicatorPtr comm, int local_rank = 0, int local_world_size = 0);
  ~Trainer();

  void add_callback(std::shared_ptr<Callback> callback);

  // Trains from the current position (0, or where a loaded checkpoint left off) to the end.
  TrainResult fit();
  // Evaluates the strategy's evaluation models on the test set (kfold: the held-out fold), each
  // rank on its share; reduced. The first model's metrics; see evaluate_all for the others.
  EvalMetrics evaluate();
  // Asks the loop to stop after the current step; every rank must ask at the same step (decide
  // from reduced figures only), or the ranks fall out of step.
  void request_stop(std::string reason);
  bool stop_requested() const { return stop_requested_; }

  // The position and everything needed to continue exactly: the strategy's state (model,
  // optimizer, its own), random state, step, epoch and the sampler's position. load_state()
  // expects a Trainer built from the same config (another world size or strategy continues where
  // the mathematics allows). Both are collective: call them on every rank; save_state is not when
  // `gather` is false, for a rank whose peers are gone (Note [Elastic workers] in
  // run/ElasticWorker.h): it then keeps this rank's random state, which stands for every rank's,
  // and this rank's counts of the epoch's training metrics instead of their sum.
  void save_state(io::Checkpoint& checkpoint, bool gather = true) const;
  void load_state(const io::Checkpoint& checkpoint);

  const config::RunConfig& config() const { return config_; }
  int rank() const;
  int world_size() const;
  // Who the training set is partitioned over: ranks, or graph nodes (parallel::data_holders).
  int data_holders() const { return holders_; }
  std::int64_t step() const { return step_; }
  std::int64_t epoch() const { return epoch_; }
  std::int64_t total_steps() const { return total_steps_; }
  std::int64_t steps_per_epoch() const;
  parallel::Strategy& strategy() { return *strategy_; }
  const data::DataSets& datasets() const { return data_; }
  const comm::CommunicatorPtr& communicator() const { return comm_; }
  const ModelFacts& model_facts() const { return facts_; }
  // Where the model, its batches and its optimizer state live (train.device).
  torch::Device device() const { return device_; }
  // Which training samples each rank holds (data_partition_hash).
  std::string data_partition_hash() const { return partition_hash_; }

 private:
  struct Evaluation {
    std::vector<std::pair<std::string, EvalMetrics>> models;  // in the strategy's order
  };
  Evaluation evaluate_all();
  // This rank's part of one model's evaluation, not yet reduced over ranks.
  // Whether step `step` (counted from 1) is one whose figures something reads: logged,
  // evaluated, checkpointed, the epoch's or the run's last, or every step with train.sync_every_step.
  bool read_point(std::int64_t step, bool epoch_end) const;
  MetricsAccumulator evaluate_model(std::size_t index, const parallel::EvalModel& model);
  // Whether the targets are next tokens (a text corpus): the metrics report perplexity.
  bool language_model() const { return data_.train->tokens() && !data_.train->per_sample_labels(); }
  void run_evaluation();
  // Trains the rest of epoch_; false when the run stopped before the epoch's end.
  bool train_epoch(TrainResult& result, std::int64_t warmup);
  void end_epoch(TrainResult& result, double epoch_seconds);
  // data.equalize: join over `world` ranks: the strategy's join steps (Note [Join]).
  void set_up_join(int world);
  // Steps in epoch_: steps_per_epoch(), or those of remainder_.
  std::int64_t epoch_steps() const;
  // total_steps_ from the position: the rest of epoch_ and the epochs after it, or train.max_steps.
  void count_total_steps();
  // load_state's part for an epoch across a size change (Note [An epoch across a size change] in
  // data/EpochRemainder.h): sets remainder_ and, where the number of holders changed, the position
  // in the epoch and the step counted as this size counts them.
  void continue_epoch(const data::RemainderPosition& position, bool same_holders);

  config::RunConfig config_;
  comm::CommunicatorPtr comm_;
  torch::Device device_{torch::kCPU};
  data::DataSets data_;
  int holders_ = 1;    // data holders: ranks, or graph nodes (parallel::data_holders)
  data::Shard shard_;  // this rank's (first) holder's share
  std::unique_ptr<DeviceFeed> feed_;
  // data.equalize: join (parallel: Note [Join]): the schedule, and the strategy's shadow steps.
  std::optional<JoinSchedule> join_;
  parallel::Joinable* joinable_ = nullptr;
  // The rest of epoch_ when the number of data holders changed within it.
  struct EpochRemainder {
    data::RemainderPosition position;  // .read: samples read before first_batch
    std::int64_t first_batch = 0;      // the step of the epoch this number of holders began at
    std::int64_t steps = 0;            // the epoch's steps
    std::vector<torch::Tensor> rest;   // for each of this rank's holders, its samples from first_batch on
    std::optional<JoinSchedule> join;  // data.equalize: join
  };
  std::optional<EpochRemainder> remainder_;
  std::unique_ptr<optim::Scheduler> scheduler_;
  optim::LossFn loss_;
  std::unique_ptr<parallel::Strategy> strategy_;
  std::unique_ptr<CudaGraphStep> graph_;  // train.cuda_graph
  std::vector<std::shared_ptr<Callback>> callbacks_;
  ModelFacts facts_;
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
  EvalEvent last_eval_;
  bool has_eval_ = false;
  std::int64_t last_eval_step_ = -1;
  // Throughput over the steps after the warm-up.
  std::int64_t timed_samples_ = 0;
  double timed_seconds_ = 0.0;
  // train.precision fp16 over this fit(): steps skipped and the last loss scale, read at its end.
  util::DeviceSum skipped_steps_;
  util::DeviceScalar loss_scale_ = 0.0;
};

// Hex digest (FNV-1a 64) of a module's parameters and buffers, in registration order.
// Throws std::invalid_argument unless `device` (train.device) is one this process can train on:
// cpu, or cuda where this LibTorch sees a CUDA device.
void check_device(config::Device device);
// check_device(train.device), and the settings that apply to a GPU only (train.cudnn_benchmark: true,
// train.float32_matmul_precision other than highest) refused by name on the CPU.
void check_device_settings(const config::TrainConfig& train);
// train.channels_last on `model` (on `device` already): its 4-D parameters made channels-last and
// its image batches taken so; auto does it on a GPU for a model with convolutions. Returns whether it
// did; throws std::invalid_argument for true on a model without 4-D weights.
bool apply_channels_last(models::Network& model, config::AutoBool setting, const torch::Device& device);
// What a run on a GPU sets for cuDNN and TF32 (train.cudnn_benchmark, float32_matmul_precision),
// by name, as results.json states it; empty on the CPU. Applies them to this process.
std::map<std::string, std::string> apply_device_settings(const config::TrainConfig& train,
                                                         const torch::Device& device);
// The device a rank trains on: the CPU, or for cuda the GPU local_rank modulo the GPUs this process
// sees (torchrun's one GPU per local rank; more ranks than GPUs share them, as gloo and mpi allow).
torch::Device resolve_device(config::Device device, int local_rank);

std::string parameter_hash(const torch::nn::Module& module);

// A hash of every rank's shard of the training set (indices and held-out fold, in rank order): two
// runs with equal hashes trained each rank on the same samples.
std::string data_partition_hash(int world, const config::DataConfig& data, const torch::Tensor& labels,
                                std::uint64_t seed);

}  // namespace dtrain::train
