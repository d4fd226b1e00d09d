// A training run stopped by SIGINT, SIGTERM or SIGHUP (Ctrl-C, a scheduler's preemption, a
// launcher forwarding either) ends as a run that stopped early: its last checkpoint saved,
// model.pt exported and results.json written with the signal as its stop reason.
//
// Note [Stopping on a signal]
// The handler only records the signal; the training loop looks at it between steps. One worker
// stops after the step in flight. Several must stop after the same step, or the ones going on wait
// for the others in the next collective: they agree every train.log_every_steps steps (one
// all-reduce of the signal number, a few bytes, where the log reads the step's figures anyway), so
// a job stops at its next log step. A launcher waits --stop-grace seconds (dtrain launch: 5) before
// it kills what has not ended; a log interval longer than that ends in the kill, as before.
#pragma once

#include <signal.h>

#include <memory>

#include "dtrain/train/Callback.h"

namespace dtrain::run {

// Installs the handlers while it lives; the previous ones come back after.
class InterruptHandlers {
 public:
  InterruptHandlers();
  ~InterruptHandlers();
  InterruptHandlers(const InterruptHandlers&) = delete;
  InterruptHandlers& operator=(const InterruptHandlers&) = delete;

  // The last signal received while they were installed, or 0.
  static int received();
};

// Stops the trainer at the first step (alone) or log step (several workers, agreed) after a signal.
class StopOnInterrupt final : public train::Callback {
 public:
  explicit StopOnInterrupt(std::int64_t every_steps) : every_(every_steps > 0 ? every_steps : 1) {}
  void on_step_end(train::Trainer& trainer, const train::StepEvent& event) override;
  // The signal that stopped the run, or 0.
  int signal() const { return signal_; }

 private:
  std::int64_t every_;
  int signal_ = 0;
};

}  // namespace dtrain::run
