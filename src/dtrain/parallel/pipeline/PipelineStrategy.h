// The `pipeline` strategy (GPipe, 1F1B): the model's sequence of layers cut into S contiguous
// stages, one per rank of a pipeline; each step's batch split into M micro-batches whose
// activations flow forward and whose gradients flow back with tagged send/recv; the loss on the
// last stage. world = replicas x stages: the ranks holding the same stage in different replicas
// all-reduce their gradients (data parallel across pipelines). Each rank keeps and updates only
// its stage's parameters and optimizer state.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/models/TiedParameters.h"
#include "dtrain/parallel/MixedPrecision.h"
#include "dtrain/parallel/Strategy.h"
#include "dtrain/parallel/pipeline/PipelineOptions.h"
#include "dtrain/parallel/pipeline/PipelineSchedule.h"
#include "dtrain/parallel/pipeline/StagePartition.h"
#include "dtrain/parallel/zero/ShardedUnits.h"

namespace dtrain::parallel::pipeline {

// Where this rank sits and what its stage holds.
struct StageLayout {
  int stages = 1;
  int replicas = 1;
  int stage = 0;    // this rank's stage
  int replica = 0;  // this rank's pipeline
  // parallel.mesh.dp_shard: the replicas of a stage come in groups of `shards` consecutive ones
  // that shard its optimizer state (Note [A stage sharded over dp_shard]); replicas / shards such
  // groups all-reduce their gradient shards.
  int shards = 1;
  // Where the ranks sit: without parallel.mesh a pipeline's stages are consecutive ranks; on a mesh,
  // its order (Note [The device mesh]): pp outermost, so a stage's replicas are consecutive.
  bool stages_outermost = false;
  int rank_of(int pipeline, int stage_index) const {
    return stages_outermost ? stage_index * replicas + pipeline : pipeline * stages + stage_index;
  }
  int stage_of(int rank) const { return stages_outermost ? rank / replicas : rank % stages; }
  int replica_of(int rank) const { return stages_outermost ? rank % replicas : rank / stages; }
  StageBounds bounds;
};

class PipelineStrategy final : public Strategy {
 public:
  // Collective over the world: splits it into pipelines and stage groups, broadcasts rank 0's
  // weights, and (balance: time) rank 0's layer timings. Throws std::invalid_argument, naming the
  // key, for a model that is not a sequence of layers, stages that do not fit the model or the
  // world, parallel.accumulation_steps > 1 or lbfgs.
  explicit PipelineStrategy(StrategyContext context);
  ~PipelineStrategy() override;

  std::string name() const override { return "pipeline"; }
  // This rank's batch joins its pipeline's batch (the ranks' batches in stage order); the loss is
  // the global batch mean on every rank; outputs (this rank's rows) on the last stage only.
  StepResult train_step(const data::Batch& batch) override;
  void set_learning_rate(double lr) override;

  // Evaluation runs through the first pipeline: its last stage (rank S-1) owns the model and
  // evaluates the whole set; its other stages serve it inside end_evaluation().
  std::vector<EvalModel> eval_models() const override;
  void begin_evaluation() override;
  torch::Tensor eval_forward(std::size_t model, const torch::Tensor& inputs) override;
  void end_evaluation() override;

  // Whole, on every rank: each stage broadcasts its part from the first pipeline.
  std::map<std::string, torch::Tensor> model_state() const override;
  // Collective: the model and every stage's optimizer state gathered to rank 0, by name (Note
  // [Checkpoint layout]); load takes this stage's names from a checkpoint of any strategy.
  void save(io::Checkpoint& checkpoint) const override;
  void load(const io::Checkpoint& checkpoint) override;

  // Collective: pipeline/idle_fraction/stage<s> (time blocked receiving activations or
  // gradients over step time, mean over replicas, steps after the first), pipeline/
  // schedule_idle_fraction/stage<s> (1 - the stage's compute time over the pipeline's schedule
  // time; see Note [Measuring the bubble]), pipeline/replay_idle_fraction/stage<s> and
  // pipeline/schedule_over_replay (the idle fraction this run's passes allow with free transfers,
  // and the schedule time measured over it; Note [Replaying the schedule]),
  // pipeline/peak_micro_batches/stage<s> (activations held at once), pipeline/expected_idle_fraction.
  std::map<std::string, double> metrics() override;
  // pipeline/stages (the cut) and pipeline/idle (the last metrics() figures in one line).
  std::map<std::string, std::string> notes() const override;
  // This rank's stage: its parameters, gradients and optimizer state (with dp_shard, its shard of
  // the gradients and of the optimizer state).
  MemoryFootprint memory_footprint() const override;
  MemoryFootprint planned_footprint() const override;

  const StageLayout& layout() const { return layout_; }
  // The most micro-batches this rank's stage held activations of at once, over all steps.
  int peak_held_micro_batches() const { return peak_held_; }

 private:
  // A parameter or buffer of the whole model, and the stage that holds it.
  struct Entry {
    std::string name;  // the model's own name, "layers.1.weight"
    int stage = 0;
    std::vector<std::int64_t> shape;
    torch::ScalarType dtype = torch::kFloat;
    bool buffer = false;
  };
  // One micro-batch between its forward and its backward on this stage.
  struct InFlight {
    torch::Tensor input;  // the received activation (a leaf that collects its gradient); undefined on stage 0
    torch::Tensor output;  // the sent activation, or on the last stage the weighted, scaled loss
  };
  // A parameter one stage owns and another stage computes with (tied embeddings): the user stage
  // holds a copy; see Note [Tied embeddings across pipeline stages].
  struct Tie {
    std::string name;  // the owner's name for it, "layers.0.tokens.weight"
    int owner = 0;     // stages
    int user = 0;
    models::TiedParameterUser* module = nullptr;  // the user, in this rank's copy of the model
    std::shared_ptr<comm::Communicator> pair;     // this pipeline's owner and user ranks; null elsewhere
  };
  struct StepPlan;     // the rows of one step (PipelineStep.cpp)
  struct ScheduleRun;  // one step's schedule as it runs on this stage (PipelineStep.cpp)

  // Construction (PipelineStrategy.cpp).
  void check_model_and_world() const;
  StageBounds cut_layers(int layers);  // collective with balance: time
  void assign_tensors();
  void find_ties(const std::map<const void*, std::pair<int, std::string>>& owner);
  void split_groups();      // collective
  void split_tie_groups();  // collective
  // What the optimizer updates without dp_shard: this stage's parameters, then its tied copies.
  std::vector<std::pair<std::string, torch::Tensor>> optimized() const;
  void release_other_stages();
  void build_optimizer();

  // The step (PipelineStep.cpp).
  torch::Tensor run_stage(const torch::Tensor& inputs);
  StepPlan plan_step(const data::Batch& batch, StepTiming& timing);
  void broadcast_buffers(StepTiming& timing);
  void gather_batch(const data::Batch& batch, const std::vector<std::int64_t>& sizes, torch::Tensor& inputs,
                    torch::Tensor& targets, StepTiming& timing);
  void run_schedule(ScheduleRun& run, const StepPlan& plan, StepResult& result);
  void forward_action(ScheduleRun& run, const StepPlan& plan, std::size_t i, StepResult& result);
  void backward_action(ScheduleRun& run, const StepPlan& plan, std::size_t i, StepResult& result);
  void post_ahead(ScheduleRun& run, const StepPlan& plan, std::size_t i);
  torch::Tensor micro_batch_loss(ScheduleRun& run, const StepPlan& plan, int m, const torch::Tensor& y);
  void finish_step(const std::vector<torch::Tensor>& parameters, double loss_sum, StepResult& result);
  void allreduce_gradients(StepTiming& timing);
  void allreduce_tied_gradients(StepTiming& timing);

  // dp_shard (PipelineShards.cpp, Note [A stage sharded over dp_shard]).
  void split_shard_groups();  // collective
  void shard_stage();         // the flat buffer and this rank's shard of it
  // The stage's gradients reduce-scattered within the shard group, the shard all-reduced across
  // groups, the full gradients let go; returns the tensors the optimizer updates.
  void gradients_into_flat_buffer();
  std::vector<torch::Tensor> reduce_scatter_gradients(StepTiming& timing);
  void gather_parameters(StepTiming& timing);  // every shard into every rank's whole stage
  std::map<std::string, torch::Tensor> stage_optimizer_state() const;  // whole, by name; collective
  void load_stage_optimizer_state(const io::Checkpoint& checkpoint);
  // The world's, the pipeline's and the stage group's traffic, and the step's share of it counted
  // as this strategy's own (result.bytes_sent).
  std::vector<comm::CommStats> traffic_snapshot() const;
  void count_step_communication(const std::vector<comm::CommStats>& before, StepResult& result);

  void serve_evaluation();  // PipelineEvaluation.cpp
  void replay_recorded();   // collective; PipelineMetrics.cpp

  StrategyContext context_;
  PipelineOptions options_;
  ScheduleKind schedule_;
  StageLayout layout_;
  std::vector<torch::nn::AnyModule> layers_;                       // this stage's
  std::vector<std::pair<std::string, torch::Tensor>> parameters_;  // this stage's, by model name
  std::vector<std::pair<std::string, torch::Tensor>> buffers_;
  std::vector<Entry> entries_;
  std::vector<Tie> ties_;                                           // every tie across stages
  std::vector<std::pair<std::string, torch::Tensor>> tied_copies_;  // this stage's, by the owner's name
  std::vector<double> parameter_counts_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  MixedPrecision precision_;
  comm::CommunicatorPtr world_;
  std::shared_ptr<comm::Communicator> pipe_;   // this rank's pipeline, ranked by stage
  std::shared_ptr<comm::Communicator> group_;  // the ranks holding this stage, ranked by replica
  // dp_shard > 1: this stage's ranks of this rank's shard group, ranked by shard, and those of
  // this rank's shard index in every group.
  std::shared_ptr<comm::Communicator> shard_group_, across_groups_;
  zero::UnitLayout stage_unit_;    // the stage's trainable parameters in one flat buffer (dp_shard > 1)
  torch::Tensor stage_flat_;       // that buffer, which the parameters alias
  torch::Tensor stage_shard_;      // this rank's part of it: what the optimizer updates
  torch::Tensor stage_grad_flat_;  // during a step: the stage's whole gradient, which its grad()s view
  bool evaluating_ = false;
  // Set while a training step's schedule runs: polls its transfers (Note [Transfers kept moving
  // between layers]); run_stage calls it after each layer's forward and backward.
  std::function<void()> between_layers_;

  // Idle time (blocked receiving activations or gradients) and step time, summed over steps
  // after the first; the peak of micro-batches held.
  std::int64_t steps_ = 0;
  double idle_seconds_ = 0.0;
  double step_seconds_ = 0.0;
  torch::Device device_{torch::kCPU};    // where the model lives: received data lands there
  double busy_seconds_ = 0.0;            // forward and backward computation inside the schedule
  double schedule_seconds_ = 0.0;        // from the schedule's first action to its sends' completion
  std::vector<double> recorded_passes_;  // per step: forward seconds per micro-batch, then backward
  double replay_seconds_ = 0.0;          // the replayed schedules' spans, summed over pipelines
  int peak_held_ = 0;
  std::vector<double> stage_idle_fraction_;     // the last metrics(), per stage
  std::vector<double> replay_idle_fraction_;    // the same
  std::vector<double> schedule_idle_fraction_;  // the same
  double schedule_over_replay_ = 0.0;           // the last metrics()
  double compute_imbalance_ = 0.0;              // the same: the busiest stage's compute over the mean
  int busiest_stage_ = 0;                       // the same
  std::vector<double> stage_peak_held_;
};

}  // namespace dtrain::parallel::pipeline
