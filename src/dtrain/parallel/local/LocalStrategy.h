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
};

}  // namespace dtrain::parallel
