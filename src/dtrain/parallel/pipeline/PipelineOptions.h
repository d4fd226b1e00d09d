// The pipeline strategy's options, parallel.pipeline.* in a configuration, or given in code to
// make_pipeline (parallel/Strategies.h).
#pragma once

#include <string>
#include <vector>

#include "dtrain/config/Options.h"

namespace dtrain::parallel::pipeline {

// parallel.pipeline.*
struct PipelineOptions {
  std::string schedule = "1f1b";  // gpipe | 1f1b (Note [Pipeline schedules])
  // Stages per pipeline; the world size must be a multiple (world / stages pipeline replicas).
  // 0: one pipeline over the whole world.
  int stages = 0;
  // Micro-batches per step; a pipeline's batch is its ranks' batches together.
  int micro_batches = 4;
  // Where the cuts go: parameters (balanced parameter counts), time (balanced forward+backward
  // time, measured per layer once at start by rank 0), cut_points (the list below).
  std::string balance = "parameters";
  // With balance cut_points: the first layer of stages 1..S-1, e.g. [2] or [3, 7].
  std::vector<int> cut_points{};
};

void describe_options(config::OptionVisitor& visitor, PipelineOptions& options);
// The stages for `world` ranks; throws std::invalid_argument naming the key when the options
// cannot be honoured at that world size (S not dividing it, cut_points against balance).
int check_options(const PipelineOptions& options, int world);

}  // namespace dtrain::parallel::pipeline
