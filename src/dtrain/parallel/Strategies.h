// Every strategy as one object over a model of one's own, for a training loop of one's own: the
// objects `dtrain train` runs, with their options as plain structs (the ones parallel.<name>.*
// fills from YAML). Like DeepSpeed's engine, a strategy owns the step: train_step(batch) runs
// forward, the loss, backward, its communication and the optimizer's update, because ZeRO gathers
// and frees parameters around forward and backward, a pipeline schedules micro-batches over ranks
// and dAD rebuilds gradients after backward. Every rank calls the same steps; the communicator
// comes from any launcher (comm::connect), as for DataParallel.
//
//   auto model = dtrain::models::network("mynet", MyNet());        // every rank, same seed
//   dtrain::parallel::ZeroOptions zero;
//   zero.stage = 3;
//   auto strategy = dtrain::parallel::make_zero({model, sgd, loss, communicator}, zero);
//   auto result = strategy->train_step({inputs, targets});         // result.loss: the global mean
//
// Each make_* checks its options as a configuration file's are checked and refuses what the model
// or the world cannot honour, by name (std::invalid_argument).
#pragma once

#include <cstdint>
#include <memory>

#include "dtrain/comm/Communicator.h"
#include "dtrain/models/Network.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/optim/LossScaler.h"
#include "dtrain/optim/Optimizers.h"
#include "dtrain/parallel/Strategy.h"
#include "dtrain/parallel/dad/DadOptions.h"
#include "dtrain/parallel/data_parallel/DataParallelStrategyOptions.h"
#include "dtrain/parallel/decentralized/DecentralizedOptions.h"
#include "dtrain/parallel/decentralized/Graph.h"
#include "dtrain/parallel/pipeline/PipelineOptions.h"
#include "dtrain/parallel/zero/ZeroOptions.h"

namespace dtrain::parallel {

// What every strategy is built from, beside its own options.
struct Training {
  // The model, built on every rank from the same seed (models::network wraps a module of one's own).
  models::NetworkPtr model;
  // Builds the optimizer over the tensors a strategy updates (all parameters, a ZeRO shard, a
  // pipeline stage, a graph node's copy): optim::optimizer_factory(config), or a function of one's
  // own returning e.g. a torch::optim::SGD over them.
  optim::OptimizerFactory optimizer;
  // The batch's mean loss of (outputs, targets): optim::create_loss("cross_entropy") or one's own.
  optim::LossFn loss;
  // Null only for make_local.
  comm::CommunicatorPtr comm;
  // fp32, bf16 (autocast) or fp16 (loss scaling), as train.precision.
  optim::Precision precision = optim::Precision::Fp32;
  // Micro-batches per step, communicating on the last (parallel.accumulation_steps).
  int accumulation_steps = 1;
  // For what a strategy draws itself (a random graph, PowerSGD's vectors), as train.seed.
  std::uint64_t seed = 0;
  // The shape of one sample: what pipeline's balance: time measures its layers with.
  models::InputSpec input{};
  // The device mesh, as parallel.mesh: e.g. {0, 2, 2} for make_zero's hybrid sharding over 4 ranks;
  // unset (all 0): what the strategy does on its own. Checked as a configuration's (resolve_mesh).
  config::MeshConfig mesh{};
  // With mesh.tp > 1, how the model's layers split over the tp ranks, as parallel.tensor: a plan of
  // "<module pattern>=<style>" (parallelize_module's plan; empty: the model's own, transformer and
  // vit) and sequence parallelism (parallel/TensorParallel.h).
  config::TensorConfig tensor{};
  // The name `loss` has in optim.loss ("cross_entropy"): a plan's output style computes the
  // vocabulary-parallel cross-entropy in its place, and refuses another loss.
  std::string loss_name{};
};

// One process, no communication: the reference the others match.
std::unique_ptr<Strategy> make_local(Training training);
// DDP: gradients averaged in buckets during backward; fp16, bf16 or PowerSGD compression.
std::unique_ptr<Strategy> make_data_parallel(Training training, DataParallelStrategyOptions options = {});
// ZeRO stage 1, 2 or 3 over the model's stages (a module of one's own is one stage).
std::unique_ptr<Strategy> make_zero(Training training, ZeroOptions options = {});
// GPipe or 1F1B over the stages of a torch::nn::Sequential (models::network(name, sequential)).
std::unique_ptr<Strategy> make_pipeline(Training training, pipeline::PipelineOptions options = {});
// dAD and rank-dAD over the model's torch::nn::Linear layers; a model without one is refused.
std::unique_ptr<Strategy> make_dad(Training training, DadOptions options = {});
std::unique_ptr<Strategy> make_rankdad(Training training, DadOptions options = {});
// DSGD, CADMM, DSGT, Choco-SGD, local SGD ... on graph nodes; graph.nodes nodes spread evenly over
// the ranks (0: one per rank), each rank's batch being its nodes' batches one after another.
std::unique_ptr<Strategy> make_decentralized(Training training, DecentralizedOptions options = {},
                                             GraphOptions graph = {});

}  // namespace dtrain::parallel
