// The `data_parallel` strategy (dSGD, DDP, Horovod): every rank holds the whole model, computes
// gradients on its slice of the global batch, and DataParallel averages them in buckets that
// all-reduce while backward runs.
#pragma once

#include "dtrain/parallel/ReplicaStrategy.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"

namespace dtrain::parallel {

// parallel.data_parallel.*
struct DataParallelStrategyOptions {
  // Gradient bucket capacity in megabytes; PyTorch DDP's default is 25.
  double bucket_mb = 25.0;
  // Gradients on the wire: none | fp16 | bf16 (halves the bytes, sums in 16 bits).
  std::string compression = "none";
  // Broadcast rank 0's buffers (BatchNorm statistics) before every step, as DDP's
  // broadcast_buffers does; costs nothing for models without buffers.
  bool broadcast_buffers = true;
};

void describe_options(config::OptionVisitor& visitor, DataParallelStrategyOptions& options);

class DataParallelStrategy final : public ReplicaStrategy {
 public:
  // Collective: broadcasts rank 0's weights (see DataParallel).
  explicit DataParallelStrategy(StrategyContext context);

  std::string name() const override { return "data_parallel"; }
  // Each rank passes its own slice of the global batch; all ranks must use the same number of
  // micro-batches. The reported loss is the mean over ranks (carried in the last bucket).
  StepResult train_step(const data::Batch& batch) override;
  // "data_parallel/buckets": buckets per step; "data_parallel/overlapped": of which launched
  // during backward in the last step (the rest are reduced in finish()).
  std::map<std::string, double> metrics() override;

  DataParallel& data_parallel() { return *dp_; }

 private:
  DataParallelStrategyOptions options_;
  std::unique_ptr<DataParallel> dp_;
};

}  // namespace dtrain::parallel
