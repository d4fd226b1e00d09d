// The small synthetic problem the Trainer tests share: an mlp on 256 random 8x8 images in four
// classes, Adam, the local strategy, two epochs, seed 7; each test changes what it studies. And a
// callback that interrupts a run.
#pragma once

#include <string>

#include "dtrain/config/RunConfig.h"
#include "dtrain/train/Trainer.h"

namespace dtrain::train::testing {

inline config::RunConfig small_trainer_config(const std::string& name) {
  config::RunConfig c;
  c.name = name;
  c.data.dataset = "synthetic";
  c.data.synthetic_shape = {1, 8, 8};
  c.data.synthetic_classes = 4;
  c.data.synthetic_size = 256;
  c.data.batch_size = 16;
  c.data.eval_batch_size = 64;
  c.data.test_subset_size = 32;
  c.model.name = "mlp";
  c.model.hidden = {16};
  c.optim.name = "adam";
  c.optim.lr = 0.01;
  c.parallel.strategy = "local";
  c.train.epochs = 2;
  c.train.seed = 7;
  c.train.log_every_steps = 0;
  return c;
}

// Stops the run after `at` steps, as an interruption would.
struct StopAt : Callback {
  explicit StopAt(std::int64_t at) : at(at) {}
  void on_step_end(Trainer& t, const StepEvent& e) override {
    if (e.step == at) t.request_stop("interrupted");
  }
  std::int64_t at;
};

}  // namespace dtrain::train::testing
