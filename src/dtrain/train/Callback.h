// Callbacks: what happens around the training loop — metrics, progress, checkpoints, early stop,
// a user's own code — is a Callback the Trainer calls at step, evaluation and epoch ends (the
// design of Catalyst dAD's runner). Every rank calls the same callbacks in the same order.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dtrain/comm/CommStats.h"
#include "dtrain/parallel/Strategy.h"
#include "dtrain/train/Metrics.h"
#include "dtrain/util/DeviceScalar.h"

namespace dtrain::train {

class Trainer;

struct StepEvent {
  std::int64_t step = 0;   // optimizer steps done, counting this one
  std::int64_t epoch = 0;  // the epoch this step belongs to, from 0
  std::int64_t batch = 0;  // the batch's index in its epoch
  // The step's loss as the strategy reports it (data_parallel: mean over ranks). Reading it (it
  // converts to double) waits for the device (Note [Reading a step's figures] in util/DeviceScalar.h).
  util::DeviceScalar loss;
  double lr = 0.0;
  std::int64_t samples = 0;   // this step's samples over all ranks
  double step_seconds = 0.0;  // wall time of the step, data loading included
  // Of which, on this rank: forward, backward, waiting for communication, update (they sum to at
  // most step_seconds: loading the batch is none of them). See parallel::StepTiming.
  parallel::StepTiming timing;
  // Bytes this rank sent for the step's own communication (parallel::StepResult::bytes_sent).
  std::uint64_t bytes_sent = 0;
  // train.precision fp16: whether the step was skipped for an inf/NaN gradient (1 or 0, on every
  // rank alike), and the loss scale after it (parallel::StepResult); 0 without loss scaling. Both
  // may still be on the device: reading them waits for it, as for the loss.
  util::DeviceScalar skipped = 0.0;
  util::DeviceScalar loss_scale = 0.0;
};

struct EvalEvent {
  std::int64_t step = 0;
  // The epoch of the step it follows, from 1 (the epoch that just ended, at an epoch's end; 0 before
  // the first step), as metrics.jsonl and the log number epochs.
  std::int64_t epoch = 0;
  EvalMetrics metrics;  // the strategy's first evaluation model, on the evaluation set, reduced
  // The strategy's further evaluation models by name (decentralized: each node), if any.
  std::map<std::string, EvalMetrics> others;
  // The strategy's own figures at this point (Strategy::metrics(), e.g. consensus error).
  std::map<std::string, double> strategy_metrics;
};

struct EpochEvent {
  std::int64_t epoch = 0;  // the epoch that ended, from 0
  std::int64_t step = 0;
  double seconds = 0.0;  // wall time of the epoch's training steps
  EvalMetrics train;     // metrics of the epoch's training batches (outputs as trained), reduced over ranks
};

struct TrainResult {
  std::int64_t steps = 0;
  std::int64_t epochs_completed = 0;
  // The epoch the run ended in, from 1, a partial one counted: the epoch its last evaluation line
  // names (EvalEvent::epoch).
  std::int64_t epochs_reached = 0;
  EvalMetrics final_eval;
  EvalMetrics last_train;         // the last completed epoch's training metrics
  double samples_per_second = 0;  // whole job, training steps only, after the warm-up steps
  double train_seconds = 0;       // wall time of all training steps
  // The training steps this fit() ran (fewer than `steps` after a resume), and over them, on this
  // rank, the summed phases of each step and bytes sent by the steps' own communication.
  std::int64_t steps_run = 0;
  parallel::StepTiming step_time;
  std::uint64_t bytes_sent = 0;
  // train.precision fp16: steps this fit() skipped for overflowing gradients, and the loss scale
  // after its last step (0 without loss scaling).
  std::int64_t skipped_steps = 0;
  double loss_scale = 0.0;
  // This rank's communication by the strategy (its own traffic only: the training steps' and its
  // setup's, not metric reductions or checkpoints).
  comm::CommStats comm;
  std::map<std::string, EvalMetrics> final_others;       // see EvalEvent::others
  std::map<std::string, double> final_strategy_metrics;  // see EvalEvent::strategy_metrics
  std::map<std::string, std::string> strategy_notes;     // Strategy::notes(): how it set itself up
  bool stopped_early = false;
  std::string stop_reason;
  // On a GPU: the most bytes of tensors this rank held at once during fit() (the model's included),
  // torch.cuda.max_memory_allocated's figure; 0 on the CPU.
  std::int64_t gpu_memory_peak_bytes = 0;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Trainer&) {}
  virtual void on_step_end(Trainer&, const StepEvent&) {}
  virtual void on_evaluation(Trainer&, const EvalEvent&) {}
  virtual void on_epoch_end(Trainer&, const EpochEvent&) {}
  virtual void on_train_end(Trainer&, const TrainResult&) {}
};

}  // namespace dtrain::train
