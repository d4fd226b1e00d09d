// The callbacks a `dtrain train` run installs: metrics to the run folder's sinks and the log,
// the progress bar, and checkpoints. Each is usable on its own from a user's program.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/Logger.h"
#include "dtrain/io/MetricsSink.h"
#include "dtrain/io/ProgressBar.h"
#include "dtrain/train/Callback.h"
#include "dtrain/util/DeviceScalar.h"

namespace dtrain::train {

// Scalars every `every_steps` steps, averaged over the interval: train/loss, train/lr,
// train/samples_per_s, time/step_s, rank 0's time split time/forward_s, time/backward_s,
// time/comm_s, time/update_s (parallel::StepTiming) and comm/bytes_per_step (the bytes rank 0 sent
// for each step's own communication); every evaluation (val/*) and every epoch (train/top1 ... of
// the epoch). Rank 0 writes to `sink` and the log; other ranks log their own line only for
// evaluations (so per-site logs show the reduced figures too). With per-node evaluations (the
// decentralized strategy's node<i>), each evaluation also logs DiNNO's ranges line: the min and
// max over nodes of consensus distance, validation loss and top-1, the forward-pass count and epochs.
class MetricsLog final : public Callback {
 public:
  // log_evals false: evaluation lines go to the log file only, not to the console.
  MetricsLog(io::MetricsSinkPtr sink, std::shared_ptr<io::Logger> logger, std::int64_t every_steps,
             bool log_evals = true);
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepEvent& event) override;
  void on_evaluation(Trainer& trainer, const EvalEvent& event) override;
  void on_epoch_end(Trainer& trainer, const EpochEvent& event) override;
  void on_train_end(Trainer& trainer, const TrainResult& result) override;

 private:
  io::MetricsSinkPtr sink_;  // null on ranks other than 0
  std::shared_ptr<io::Logger> logger_;
  std::int64_t every_;
  bool log_evals_;
  // Logs the steps fp16 skipped since the last report (steps first_step_ to last_step), if any.
  void report_skipped(Trainer& trainer, std::int64_t last_step);

  // The interval since the last logged step. Losses and skipped steps still on their device are
  // summed there until a log line reads them (Note [Reading a step's figures]).
  util::DeviceSum loss_sum_, skipped_;
  util::DeviceScalar loss_scale_;
  std::int64_t first_step_ = 0;
  double seconds_ = 0;
  parallel::StepTiming timing_;
  std::uint64_t bytes_ = 0;
  std::int64_t samples_ = 0, steps_ = 0;
  std::map<std::string, std::string> logged_notes_;
};

// The progress bar on rank 0's console.
class Progress final : public Callback {
 public:
  explicit Progress(std::shared_ptr<io::Console> console);
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepEvent& event) override;
  void on_train_end(Trainer& trainer, const TrainResult& result) override;

 private:
  std::shared_ptr<io::Console> console_;
  std::unique_ptr<io::ProgressBar> bar_;
  std::int64_t first_step_ = 0;
};

struct CheckpointOptions {
  std::int64_t every_steps = 0;  // 0 = not by steps
  int every_epochs = 1;          // 0 = not by epochs
  bool at_end = true;
  int keep = 0;  // the newest checkpoints kept (train.keep_checkpoints); 0 = every one
};

// Saves the Trainer's state (collective: every rank takes part; rank 0 writes) into a
// CheckpointStore, and at the end exports the weights as model.pt for Python's torch.load.
class Checkpointing final : public Callback {
 public:
  Checkpointing(std::filesystem::path dir, std::filesystem::path export_path, CheckpointOptions options,
                std::shared_ptr<io::Logger> logger);
  void on_step_end(Trainer& trainer, const StepEvent& event) override;
  void on_epoch_end(Trainer& trainer, const EpochEvent& event) override;
  void on_train_end(Trainer& trainer, const TrainResult& result) override;

  void save(Trainer& trainer);

 private:
  io::CheckpointStore store_;
  std::filesystem::path export_path_;
  CheckpointOptions options_;
  std::shared_ptr<io::Logger> logger_;
  std::int64_t last_saved_step_ = -1;
};

}  // namespace dtrain::train
