// The `data_parallel` strategy (dSGD, DDP, Horovod): every rank holds the whole model, computes
// gradients on its slice of the global batch, and DataParallel averages them in buckets that
// all-reduce while backward runs.
#pragma once

#include "dtrain/parallel/ReplicaStrategy.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"
#include "dtrain/parallel/data_parallel/DataParallelStrategyOptions.h"

namespace dtrain::parallel {

class DataParallelStrategy final : public ReplicaStrategy, public Joinable {
 public:
  // Collective: broadcasts rank 0's weights (see DataParallel).
  explicit DataParallelStrategy(StrategyContext context);

  std::string name() const override { return "data_parallel"; }
  // Each rank passes its own slice of the global batch; all ranks must use the same number of
  // micro-batches. The reported loss is the mean over ranks (carried in the last bucket).
  StepResult train_step(const data::Batch& batch) override;
  // Note [Join]: refused with compression powersgd; a shadow step all-reduces zero gradients and a
  // zero loss in the same buckets as a real one.
  void check_joinable() const override;
  StepResult join_step(const data::Batch* batch, double weight) override;
  // "data_parallel/buckets": buckets per step; "data_parallel/overlapped": of which launched
  // during backward in the last step (the rest are reduced in finish()).
  std::map<std::string, double> metrics() override;
  // With powersgd, "data_parallel/powersgd": the tensors compressed and the elements a compressed
  // step sends against plain all-reduce's.
  std::map<std::string, std::string> notes() const override;
  // The model, the optimizer and, with powersgd, its state under strategy/data_parallel/powersgd/
  // (Note [PowerSGD state in checkpoints]).
  void save(io::Checkpoint& checkpoint) const override;
  void load(const io::Checkpoint& checkpoint) override;

  DataParallel& data_parallel() { return *dp_; }

 private:
  // batch null: a shadow step (Note [Join]).
  StepResult step(const data::Batch* batch);

  DataParallelStrategyOptions options_;
  std::unique_ptr<DataParallel> dp_;
};

}  // namespace dtrain::parallel
