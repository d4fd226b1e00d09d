// The order in which one pipeline stage runs the forward and backward passes of a step's
// micro-batches: GPipe (all forwards, then all backwards) or 1F1B (PipeDream-Flush). Pure
// functions of (schedule, stages, stage, micro-batches), so every rank derives the same plan and
// the tests can count what a stage holds without running a model.
#pragma once

#include <vector>

#include "dtrain/parallel/pipeline/PipelineOptions.h"

namespace dtrain::parallel::pipeline {

// ScheduleKind and its names (kScheduleNames) are parallel.pipeline.schedule's, in PipelineOptions.h.

struct PipelineAction {
  enum class Pass { Forward, Backward };
  Pass pass;
  int micro_batch;
  bool operator==(const PipelineAction& other) const {
    return pass == other.pass && micro_batch == other.micro_batch;
  }
};

// Note [Pipeline schedules]
// GPipe (Huang et al. 2019): every stage runs the M forwards in order, then the M backwards in
// the same order, so each stage holds the activations of all M micro-batches at the turn.
// 1F1B as PipeDream-Flush runs it (Narayanan et al. 2021, §3): stage s first runs
// min(S-1-s, M) warm-up forwards, then alternates one forward and one backward until the
// forwards are done, then the remaining backwards (cool-down); the optimizer steps after the
// flush, so the weights are those of one process, and a stage holds at most S-s <= S
// micro-batches of activations. Both leave every stage idle for about (S-1)/(M+S-1) of the step
// when the stages cost the same. What we do differently: backwards run in micro-batch order in
// both (GPipe's paper leaves the order open; torchgpipe goes in reverse), and GPipe's activation
// re-materialisation is not done (activations are kept; the held count is what tests assert).
std::vector<PipelineAction> stage_schedule(ScheduleKind kind, int stages, int stage, int micro_batches);

// The most micro-batches whose activations are held at once (a forward done, its backward not
// yet) while running `actions` in order.
int peak_held_micro_batches(const std::vector<PipelineAction>& actions);

// GPipe's and 1F1B's idle fraction when every stage costs the same: (S-1)/(M+S-1).
double expected_idle_fraction(int stages, int micro_batches);

// Note [Replaying the schedule]
// How long `kind`'s schedule takes for the given pass times when transfers are free and
// instant: forward[s][m] and backward[s][m] are stage s's seconds for micro-batch m (S stages,
// M micro-batches each). Each stage runs its actions in stage_schedule's order; a forward starts
// when its stage is free and the stage before has finished that micro-batch's forward, a
// backward when the stage after has finished its backward. Returns the last action's end, from
// all stages starting at 0. With every pass of a kind equal across stages (F, B) that is
// (M+S-1)(F+B), GPipe's formula; with the passes a run measured, it is the schedule's time that
// those passes allow, so the measured schedule time over it is what the transfers and the
// waiting for them cost (PipelineStrategy's pipeline/replay_idle_fraction and
// pipeline/schedule_over_replay). A list-scheduling replay of a fixed order, not an optimiser:
// it does not reorder passes to shorten the schedule.
double replay_schedule(ScheduleKind kind, const std::vector<std::vector<double>>& forward,
                       const std::vector<std::vector<double>>& backward);

}  // namespace dtrain::parallel::pipeline
