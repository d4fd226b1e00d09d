// The `local` strategy: one process, no communication; the baseline every distributed strategy
// must reproduce. Gradient accumulation over micro-batches like data_parallel.
#pragma once

#include "dtrain/parallel/ReplicaStrategy.h"

namespace dtrain::parallel {

class LocalStrategy final : public ReplicaStrategy {
 public:
  // context.comm is optional: with one, each rank trains its own copy on its own data.
  explicit LocalStrategy(StrategyContext context);

  std::string name() const override { return "local"; }
  StepResult train_step(const data::Batch& batch) override;
  // Note [local on several workers]
  // With a communicator of N > 1 ranks every rank trains a model of its own on its own shard: there
  // are N models and no one of them is "the" model. Averaging their figures would report a top-1 no
  // saved model has, so the evaluation is rank 0's model (the one model.pt and the checkpoints hold)
  // on the whole evaluation set, and notes() says so.
  std::vector<EvalModel> eval_models() const override;
  std::map<std::string, std::string> notes() const override;
};

}  // namespace dtrain::parallel
