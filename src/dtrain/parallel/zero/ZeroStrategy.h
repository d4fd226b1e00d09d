// The `zero` strategy: sharded data parallel after ZeRO (Rajbhandari et al. 2020) and FairScale's
// FSDP. Every rank computes on its slice of the global batch as in data_parallel, but the model
// state is split: stage 1 shards the optimizer state, stage 2 also the gradients, stage 3 also the
// parameters, which are gathered stage by stage just before they are used. See Note [ZeRO in dtrain].
// On a mesh {dp_replicate: R, dp_shard: S} (parallel.mesh) the state is sharded over each group of S
// ranks and the gradient shards all-reduced across the R replicas: HSDP, Note [HSDP].
#pragma once

#include <torch/csrc/autograd/function.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/Work.h"
#include "dtrain/parallel/GradientReadyHook.h"
#include "dtrain/parallel/Mesh.h"
#include "dtrain/parallel/MixedPrecision.h"
#include "dtrain/parallel/Strategy.h"
#include "dtrain/parallel/zero/ShardedUnits.h"
#include "dtrain/parallel/zero/ZeroOptions.h"

namespace dtrain::parallel {

class ZeroStrategy final : public Strategy {
 public:
  // Collective: checks that every rank built the same model and broadcasts rank 0's parameters
  // and buffers, splits the mesh's shard and replicate groups, then shards them. Refuses lbfgs (its history
  // is one vector over all parameters, not element-wise) and a model with a parameter in no stage; a
  // parameter two stages share belongs to the first (Note [Tied parameters under zero]).
  explicit ZeroStrategy(StrategyContext context);
  // Stage 3 leaves the model's parameters without storage (the shards are the parameters); read
  // them through model_state() before destroying the strategy.
  ~ZeroStrategy() override;

  std::string name() const override { return "zero"; }
  StepResult train_step(const data::Batch& batch) override;
  void set_learning_rate(double lr) override;
  // Stage 3 gathers every stage's parameters for evaluation and frees them after.
  void begin_evaluation() override;
  torch::Tensor eval_forward(std::size_t model, const torch::Tensor& inputs) override;
  void end_evaluation() override;
  std::map<std::string, torch::Tensor> model_state() const override;
  // Whole tensors by name (Note [Checkpoint layout]): the shards' optimizer state is gathered and
  // cut back into parameters, so a checkpoint reads under any world size and strategy.
  void save(io::Checkpoint& checkpoint) const override;
  void load(const io::Checkpoint& checkpoint) override;
  // "zero/units": the units (stages with parameters); stages 2 and 3, "zero/overlapped": of which
  // reduce-scattered during the last backward (the rest were launched after it).
  std::map<std::string, double> metrics() override;
  // "zero/layout": the units (model stages with parameters) against the model's stages, the
  // parameters, the padding and the shard per rank.
  std::map<std::string, std::string> notes() const override;
  // What this rank holds: see Note [ZeRO's accounting].
  MemoryFootprint memory_footprint() const override;
  // The same accounting predicted before the first step, the gradient buffers of Note [Gradient
  // buffers] counted at their most (stages 2 and 3).
  MemoryFootprint planned_footprint() const override;

  int stage() const { return options_.stage; }
  // The bytes of the buffers a step reuses (Note [Reused buffers]): kept after the step, beyond
  // memory_footprint(); they grow to their high-water mark during the first steps.
  std::uint64_t buffer_bytes() const;
  // The units, in forward order (tests and notes).
  std::vector<zero::UnitLayout> layouts() const;
  // The mesh it runs on: {dp_shard: N} without parallel.mesh.
  const MeshShape& mesh() const { return mesh_->shape(); }

 private:
  struct Unit {
    zero::UnitLayout layout;
    torch::Tensor full;   // the padded flat parameters; stage 3: storage freed between uses
    torch::Tensor shard;  // what the optimizer updates: this rank's part of full
    torch::Tensor
        full_grad;  // stage 1: the whole step's; stages 2 and 3: this backward's, filling or in flight
    torch::Tensor received;   // the reduce-scatter's output, when it is not the shard's gradient itself
    torch::Tensor full_slot;  // stage 3, while gathered: the pool's memory full's storage points into
    comm::WorkPtr gather;     // stage 3: an all-gather in flight
    comm::WorkPtr reduce;     // stages 2 and 3: a reduce-scatter in flight
    int pending = 0;          // parameters still without a gradient in this backward
    bool launched = false;    // its reduce-scatter launched in this backward
    std::vector<AccumulatorPtr> accumulators;
    std::vector<std::uintptr_t> hook_keys;
    std::vector<const torch::autograd::FunctionPreHook*> pre_hooks;  // to remove them by identity
  };

  // Collective: the mesh's shard group and, with replicas, its replicate group (Note [HSDP]).
  void split_groups();
  torch::Tensor forward_sharded(const torch::Tensor& inputs);
  // Stage 3: gives unit u's full buffer memory (a pooled slot) and takes it away again.
  void allocate_full(std::size_t u);
  void free_full(std::size_t u);
  void launch_gather(std::size_t u);
  void wait_gather(std::size_t u, double* communication_seconds = nullptr);
  void release(std::size_t u);
  void gather_all(double* communication_seconds = nullptr);
  void release_all();
  void pre_backward(std::size_t u);
  // Stages 2 and 3: before autograd adds the first gradient of unit u in a backward, gives the
  // unit a zeroed flat gradient buffer and points its parameters' grad() into it.
  void before_gradient(std::size_t u);
  void on_gradient_ready(std::size_t u);
  void launch_ready_reductions();
  void launch_reduction(std::size_t u);
  // Waits for the oldest reduction in flight and adds it to its shard's gradient.
  void retire_reduction();
  // Waits for this backward's reductions and adds them to the shards' gradients; `last`: the
  // step's last backward (stage 3 then frees every unit still gathered).
  double finish_backward(bool last);
  double reduce_scatter_step_gradients();
  // HSDP: every unit's shard gradient all-reduced (summed) across the replicas holding that shard.
  double allreduce_across_replicas();
  // The traffic of the world and the mesh's groups, each counted once.
  std::vector<comm::CommStats> traffic_now() const;
  comm::CommStats traffic_since(const std::vector<comm::CommStats>& before) const;
  double gather_after_step();
  void install_hooks();
  void remove_hooks();
  void wait_outstanding_quietly();
  bool sharded_parameters() const { return options_.stage == 3; }

  StrategyContext context_;
  ZeroOptions options_;
  // The world's sub-communicators (Note [HSDP]): shard_ all-gathers and reduce-scatters within a
  // shard group, replicate_ all-reduces across replicas (null without replicas); the world itself
  // where a group spans it.
  std::unique_ptr<DeviceMesh> mesh_;
  comm::CommunicatorPtr shard_;
  comm::CommunicatorPtr replicate_;
  int rank_ = 0;    // this rank's place in its shard group: the shard it holds
  int shards_ = 1;  // the ranks of a shard group (dp_shard): a unit is padded to a multiple of it
  int ranks_ = 1;   // the world: each rank's gradient weighs 1/ranks_ in the mean
  std::vector<Unit> units_;
  std::vector<int> unit_of_stage_;  // -1 for stages without parameters
  // Per stage, the units of other stages it computes with (Note [Tied parameters under zero]), and
  // whether a unit is so borrowed: stage 3 then keeps it gathered from its forward to its backward.
  std::vector<std::vector<std::size_t>> borrowed_;
  std::vector<bool> lent_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  MixedPrecision precision_;
  std::size_t next_reduction_ = 0;  // into units_ counted from the back (backward's order)
  // Units whose reduce-scatter is in flight, oldest first. At most kGradientBuffers units hold a
  // whole flat gradient buffer at once, the ones autograd is filling and the ones in flight: see
  // Note [Gradient buffers].
  static constexpr std::size_t kGradientBuffers = 2;
  std::deque<std::size_t> in_flight_;
  // Note [Reused buffers]: units' flat gradients (kGradientBuffers at once), shard-sized outputs and
  // copies (two at once), stage 3's gathered units (the one in use and the prefetched one).
  zero::BufferPool gradient_pool_{0, 0};
  zero::BufferPool shard_pool_{0, 0};
  zero::BufferPool unit_pool_{0, 0};
  bool first_backward_ = true;  // the step's first backward reduces straight into the shards' gradients
  std::size_t filling_ = 0;     // units with a gradient buffer whose reduce-scatter is not launched
  bool evaluating_ = false;
  int overlapped_ = 0;    // units whose reduce-scatter the last backward launched
  bool in_step_ = false;  // inside train_step's forward and backward (fp16 rounds what it gathers)
};

}  // namespace dtrain::parallel
