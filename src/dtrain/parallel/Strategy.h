// Strategy: how one optimisation step is shared between ranks, and the owner of the model state.
// A strategy is built from a StrategyContext (the model, how to build an optimizer, the loss, the
// communicator and the parallel options) and offers the training step, the model for evaluation,
// save/load of everything a resume needs, its own communication and its own metrics. The trainer
// calls only this interface, so adding a strategy changes no trainer code. Strategies register by
// name (parallel/Registry.h), one folder each.
#pragma once

#include <torch/nn/module.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/CommStats.h"
#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/data/Batch.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/Network.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/optim/LossScaler.h"
#include "dtrain/optim/Optimizers.h"
#include "dtrain/util/DeviceScalar.h"

namespace dtrain::parallel {

// What a strategy is built from. Every rank builds the model from the same seed before this.
struct StrategyContext {
  models::NetworkPtr model;
  optim::OptimizerFactory make_optimizer;  // over the parameters this rank updates
  // The loss of a batch, reduced by the mean over its samples (cross-entropy's default):
  // strategies that split a batch weight each part's loss by its share of the samples.
  optim::LossFn loss;
  comm::CommunicatorPtr comm;  // null: one process, no communication
  // parallel.*, with this strategy's own section parallel.<name>.* in options.
  config::ParallelConfig parallel;
  // The training samples of every data holder (rank, or graph node for decentralized strategies),
  // in holder order; empty where the caller has no data (tests of the step alone).
  std::vector<std::int64_t> holder_sizes{};
  // train.seed, for what a strategy draws itself (a random graph, random-k coordinates).
  std::uint64_t seed = 0;
  // train.precision: every strategy computes its forward and backward in it (parallel/MixedPrecision.h)
  // or refuses it when built.
  optim::Precision precision = optim::Precision::Fp32;
  // The shape of one sample (what pipeline's balance: time measures its layers on).
  models::InputSpec input{};
  // optim.loss's name ("cross_entropy"), for what depends on which loss it is (tensor parallelism's
  // vocabulary-parallel cross-entropy); empty where the caller does not say.
  std::string loss_name{};
  // The ranks on this rank's host as its launcher said (the rendezvous's local world size), for
  // what groups ranks by host (decentralized hierarchical gossip); 0 where no launcher said.
  int local_world_size = 0;
};

// Where one step's wall time went on this rank (Catalyst dAD's batch timer), in seconds, each phase
// summed over micro-batches and over an optimizer's closure evaluations (L-BFGS). Forward (the
// model and the loss) and backward are computation, including whatever communication they launch
// and do not wait for (data_parallel's bucket all-reduces overlap backward); communication is only
// the time blocked waiting for this strategy's collectives; update is the rest of the step: the
// optimizer step and whatever the strategy computes from what it received (e.g. dAD rebuilding
// gradients), zeroing gradients and bookkeeping. The four sum to the step's wall time inside
// train_step.
struct StepTiming {
  double forward = 0.0;
  double backward = 0.0;
  double communication = 0.0;
  double update = 0.0;
  double total() const { return forward + backward + communication + update; }
  double computation() const { return forward + backward + update; }
  StepTiming& operator+=(const StepTiming& other) {
    forward += other.forward;
    backward += other.backward;
    communication += other.communication;
    update += other.update;
    return *this;
  }
  // Makes `update` the rest of a step that took `step_seconds`, once the other phases are in.
  void set_update_to_rest(double step_seconds) {
    update = std::max(0.0, step_seconds - (forward + backward + communication));
  }
};

struct StepResult {
  // Mean loss over the whole step's batch: this rank's batch for `local`, the global batch (mean
  // over ranks) for strategies that synchronise. From the last closure evaluation when the
  // optimizer (L-BFGS) evaluates several times. A strategy leaves it on the device it computed it
  // on (util::DeviceScalar::of), for the trainer to read when it logs (Note [Reading a step's figures]).
  util::DeviceScalar loss;
  // Detached outputs for this rank's batch, for training metrics; undefined on ranks that compute
  // none (a pipeline's earlier stages).
  torch::Tensor outputs;
  std::int64_t samples = 0;  // this rank's samples in the step
  StepTiming timing;
  // Bytes this rank put on the wire for the step's own communication, under the algorithms the
  // backend actually ran (comm::OpStats::wire_bytes); 0 for a strategy that does not communicate.
  std::uint64_t bytes_sent = 0;
  // train.precision fp16: whether the step was skipped because some rank's gradients held an inf
  // or NaN (1 or 0, the same on every rank), and the loss scale after the step; 0 without a loss
  // scale. Both may still be on the device, read when logged (Note [A loss scaler on the device]).
  util::DeviceScalar skipped = 0.0;
  util::DeviceScalar loss_scale = 0.0;
  // How often the optimizer evaluated the step's closure (forward, backward and, where the strategy
  // synchronises, the all-reduce): 1 for sgd and adam, 1 or more for lbfgs, equal on every rank
  // (Note [Distributed L-BFGS]).
  std::int64_t closure_evaluations = 0;
};

// The bytes this rank holds in the model state, in ZeRO's accounting (Rajbhandari et al. 2020,
// §3): parameters, gradients (allocated .grad tensors and any flat gradient buffers the strategy
// keeps) and optimizer state (momentum, Adam's moments, L-BFGS's history), each counted once
// even where tensors are views of one flat buffer. What `dtrain bench throughput` prints per rank.
struct MemoryFootprint {
  std::uint64_t parameters = 0;
  std::uint64_t gradients = 0;
  std::uint64_t optimizer_state = 0;
  // Of `gradients`, what a step holds only while it runs and frees when it ends (a sharded unit's
  // whole gradient before its reduce-scatter): planned_footprint() counts it, memory_footprint()
  // between steps finds none.
  std::uint64_t step_gradients = 0;
  std::uint64_t total() const { return parameters + gradients + optimizer_state; }
  // What stays between steps: ZeRO's model state per rank.
  std::uint64_t held() const { return total() - step_gradients; }
};

// The bytes of these tensors in ZeRO's three kinds, each storage counted once within its kind (a
// tensor that views a flat buffer adds nothing beyond the buffer; undefined tensors count 0): the
// accounting every strategy's memory_footprint() uses.
MemoryFootprint footprint_of(const std::vector<torch::Tensor>& parameters,
                             const std::vector<torch::Tensor>& gradients,
                             const std::vector<torch::Tensor>& optimizer_state);
// The parameters and gradients of `module` and the given optimizer state (each storage counted once).
MemoryFootprint module_footprint(const torch::nn::Module& module,
                                 const std::vector<torch::Tensor>& optimizer_state = {});

// A model the trainer evaluates: the model itself for most strategies; for decentralized training
// the node average and each node.
struct EvalModel {
  std::string name;  // "model", "average", "node3"
  // -1: every rank holds it and evaluates its share of the evaluation set (the results are summed
  // over ranks). r >= 0: only rank r holds it and evaluates the whole set.
  int owner = -1;
};

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // "local", "data_parallel", ...: the name it is registered under.
  virtual std::string name() const = 0;

  // One optimisation step on this rank's batch: forward, backward, communication, update. Every
  // rank calls it at the same steps.
  virtual StepResult train_step(const data::Batch& batch) = 0;
  // The learning rate of every optimizer the strategy steps (the trainer's schedule, each step).
  virtual void set_learning_rate(double lr) = 0;
  // Batches each data holder consumes in one step (CADMM's primal iterations); the trainer hands
  // train_step that many per holder, concatenated (see train/StepFeed.h).
  virtual int batches_per_step() const { return 1; }

  // Evaluation, bracketed by begin_evaluation() and end_evaluation(), both collective (a sharded
  // strategy gathers its parameters in begin, decentralized ones average their nodes). In between,
  // eval_forward(i, inputs) runs eval_models()[i] without gradients and returns its outputs, or an
  // undefined tensor on a rank that produces none.
  virtual std::vector<EvalModel> eval_models() const;
  virtual void begin_evaluation() {}
  virtual torch::Tensor eval_forward(std::size_t model, const torch::Tensor& inputs) = 0;
  virtual void end_evaluation() {}

  // The model's parameters and buffers by name, whole (gathered if sharded; decentralized: the
  // node average). Collective. What checkpoints hold under "model." and model.pt exports.
  virtual std::map<std::string, torch::Tensor> model_state() const = 0;
  // Everything a resume needs beyond the trainer's position: the model, the optimizer state and
  // the strategy's own state, in a form that another world size or strategy reads where the
  // mathematics allows (see Note [Checkpoint layout]). Collective; every rank passes a checkpoint,
  // rank 0's is written.
  virtual void save(io::Checkpoint& checkpoint) const = 0;
  virtual void load(const io::Checkpoint& checkpoint) = 0;

  // This strategy's own communication since it was built: its collectives only, not the
  // trainer's metric reductions or checkpoint traffic. What the strategy counted with
  // count_own_communication and add_own_communication.
  virtual comm::CommStats comm_stats() const { return own_comm_; }
  // Figures of the strategy's own for the log (e.g. consensus error), by name. Collective where
  // they need communication: the trainer calls it on every rank at every evaluation.
  virtual std::map<std::string, double> metrics() { return {}; }
  // Facts about how the strategy set itself up, for the log and results.json (e.g. dAD's choice
  // per layer); settled after the first step.
  virtual std::map<std::string, std::string> notes() const { return {}; }
  // What this rank holds in parameters, gradients and optimizer state now (after a step the
  // optimizer state exists). Local, no communication.
  virtual MemoryFootprint memory_footprint() const = 0;
  // What this rank will hold once it has stepped, predicted when the strategy is built, before the
  // first step allocates gradients and optimizer state: memory_footprint()'s accounting, with the
  // gradients a step holds at once on its way (a stage's whole gradient before its reduce-scatter).
  // What the run prints and checks against the host's memory before it starts (parallel/MemoryPlan.h).
  // All zero where the strategy predicts nothing. Local, no communication.
  virtual MemoryFootprint planned_footprint() const { return {}; }

 protected:
  Strategy() = default;

  // Counts `comm`'s traffic since `before` (a stats() snapshot taken when this strategy's own
  // communication began) as this strategy's own, and returns it (a step's bytes_sent is its
  // total().wire_bytes); nothing without a communicator. The trainer does not communicate while a
  // strategy's step runs, so the difference is exactly the strategy's.
  comm::CommStats count_own_communication(const comm::CommunicatorPtr& comm, const comm::CommStats& before);
  // Traffic measured otherwise (over several communicators at once) added to this strategy's own.
  void add_own_communication(const comm::CommStats& traffic) { own_comm_ += traffic; }

 private:
  comm::CommStats own_comm_;
};

// Note [Join]
// data.equalize: join lets ranks hold different numbers of batches (an uneven partition, a data set
// that does not divide) without padding them to the largest share (torch's DistributedSampler,
// dtrain's default `pad`, which repeats samples of the smaller shares) or cutting them to the
// smallest (`drop`). Every rank knows every rank's share size (data::Shard::rank_sizes), so the
// schedule is decided up front, without communication (train/JoinSchedule.h): an epoch has as many
// steps as the largest share has batches; at step k the ranks that still have a batch train on it,
// and the others run a shadow step that takes part in the same collectives with a zero
// contribution. A rank's gradient counts its share of the step's samples, so the synchronised
// gradient is the mean over every sample the step trained on: what one process computes on the
// concatenation of the ranks' batches (train/JoinSchedule.h's weights; tests/parallel/data_parallel/
// JoinTest.cpp checks it against that reference). The epoch ends on every rank at the same step,
// and no rank waits for a collective another never joins.
// PyTorch's Join context manager (torch.distributed.algorithms.join, DDP's join hook) decides at
// run time: every iteration the ranks that still have data all-reduce a flag, the ones that ran
// out shadow it and DDP's gradient all-reduce with zeros, and by default the sum is still divided
// by the initial world size (divide_by_initial_world_size), so the gradient shrinks as ranks join
// unless that option is turned off. We know the schedule in advance, which saves the flag's
// all-reduce every step, and weight by samples, which is exact also when the last batches are
// partial (data.drop_last: false).
class Joinable {
 public:
  virtual ~Joinable() = default;
  // Throws std::invalid_argument, naming the option, when this configuration of the strategy
  // cannot run shadow steps (data_parallel with powersgd: error feedback would carry a shadow's
  // zero as information).
  virtual void check_joinable() const = 0;
  // One step of Note [Join]: `batch` is this rank's, or null when it has run out; `weight` is the
  // rank's share of the step's samples times the world size (the weights of a step sum to the world
  // size; 0 for a null batch). Every rank calls it at the same steps, and the step's result
  // carries the loss over every sample of the step and this rank's own samples (0 when shadowing).
  virtual StepResult join_step(const data::Batch* batch, double weight) = 0;
};

// Note [Checkpoint layout]
// A strategy's part of a checkpoint: "model.<name>" for every parameter and buffer, whole; for
// sgd, adam and adamw "optimizer/<parameter name>/<field>" (momentum_buffer, step, exp_avg,
// exp_avg_sq, max_exp_avg_sq), whole; for lbfgs, whose history is one flat vector over all
// parameters, LibTorch's own archive under "optimizer/lbfgs"; and anything of the strategy's own
// under "strategy/<name>/..."; fp16's loss scaler, which every strategy has, under
// "strategy/loss_scaler/..." (scale, clean_steps, skipped_steps). Whole tensors by name are what lets a run
// saved by one strategy or world size continue under another.

}  // namespace dtrain::parallel
