// The pipeline strategy's options, parallel.pipeline.* in a configuration, or given in code to
// make_pipeline (parallel/Strategies.h).
#pragma once

#include <vector>

#include "dtrain/config/Options.h"
#include "dtrain/util/EnumNames.h"

namespace dtrain::parallel::pipeline {

// The order of a stage's forward and backward passes (Note [Pipeline schedules]), named as
// parallel.pipeline.schedule names it.
enum class ScheduleKind { GPipe, OneFOneB };
inline constexpr util::EnumNames<ScheduleKind, 2> kScheduleNames{
    {{{ScheduleKind::GPipe, "gpipe"}, {ScheduleKind::OneFOneB, "1f1b"}}}};

// Where the cuts between stages go (parallel.pipeline.balance).
enum class Balance { Parameters, Time, CutPoints };
inline constexpr util::EnumNames<Balance, 3> kBalanceNames{
    {{{Balance::Parameters, "parameters"}, {Balance::Time, "time"}, {Balance::CutPoints, "cut_points"}}}};

// parallel.pipeline.*
struct PipelineOptions {
  ScheduleKind schedule = ScheduleKind::OneFOneB;  // GPipe | OneFOneB (Note [Pipeline schedules])
  // Stages per pipeline; the world size must be a multiple (world / stages pipeline replicas).
  // 0: one pipeline over the whole world.
  int stages = 0;
  // Micro-batches per step; a pipeline's batch is its ranks' batches together.
  int micro_batches = 4;
  // Where the cuts go: Parameters (balanced parameter counts), Time (balanced forward+backward
  // time, measured per layer once at start by rank 0), CutPoints (the list below).
  Balance balance = Balance::Parameters;
  // With balance CutPoints: the first layer of stages 1..S-1, e.g. [2] or [3, 7].
  std::vector<int> cut_points{};
};

void describe_options(config::OptionVisitor& visitor, PipelineOptions& options);
// The stages for `world` ranks; throws std::invalid_argument naming the key when the options
// cannot be honoured at that world size (S not dividing it, cut_points against balance).
int check_options(const PipelineOptions& options, int world);

}  // namespace dtrain::parallel::pipeline
