// Early stop at a desired accuracy (as in the DDP and Apex tutorial): stops training once the evaluation
// top-1 reaches the target. Evaluation figures are reduced over ranks, so every rank stops at the same
// step.
#pragma once

#include "dtrain/train/Callback.h"

namespace dtrain::train {

class EarlyStop final : public Callback {
 public:
  explicit EarlyStop(double target_top1) : target_(target_top1) {}
  void on_evaluation(Trainer& trainer, const EvalEvent& event) override;

 private:
  double target_;
};

}  // namespace dtrain::train
