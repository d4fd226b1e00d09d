#include "dtrain/train/EarlyStop.h"

#include <fmt/format.h>

#include "dtrain/train/Trainer.h"

namespace dtrain::train {

void EarlyStop::on_evaluation(Trainer& trainer, const EvalEvent& event) {
  if (target_ > 0 && event.metrics.top1 >= target_) {
    trainer.request_stop(fmt::format("reached target accuracy {:.4f} >= {:.4f} at step {}",
                                     event.metrics.top1, target_, event.step));
  }
}

}  // namespace dtrain::train
