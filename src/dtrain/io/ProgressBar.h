// Training progress for rank 0: on a terminal one redrawn line (step, steps/s, ETA, loss); in a log
// file or pipe a plain line every `plain_interval_s`, so batch logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dtrain/io/Console.h"

namespace dtrain::io {

struct ProgressBarOptions {
  std::int64_t total_steps = 0;  // 0 = unknown: no ETA, no bar
  std::string label = "train";
  double redraw_interval_s = 0.1;  // terminal: at most this often
  double plain_interval_s = 30.0;  // not a terminal: one line this often
  int width = 30;                  // characters of the bar
  // The clock; tests pass their own.
  std::function<std::chrono::steady_clock::time_point()> now = [] {
    return std::chrono::steady_clock::now();
  };
};

class ProgressBar {
 public:
  ProgressBar(std::shared_ptr<Console> console, ProgressBarOptions options);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `step` steps are done (counted from 0 at construction); `loss` is the latest training loss.
  void update(std::int64_t step, double loss);
  // The same, with the loss read (`loss()` called) only when the bar is drawn: a step's loss on a
  // GPU is read on the host only every redraw, not every step.
  void update(std::int64_t step, std::function<double()> loss);
  // Prints the final state as a normal line and releases the status line.
  void finish();

  // The text shown for the current state, e.g. "train [=====>    ] 120/500 24.1 steps/s ETA 0:15 loss
  // 0.4132".
  std::string render() const;

 private:
  std::shared_ptr<Console> console_;
  ProgressBarOptions options_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_shown_;
  std::int64_t step_ = 0;
  double loss_ = 0.0;
  std::function<double()> loss_source_;  // the latest step's loss, not yet read
  bool finished_ = false;
};

}  // namespace dtrain::io
