// See PipelineSchedule.h and Note [Pipeline schedules].
#include "dtrain/parallel/pipeline/PipelineSchedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace dtrain::parallel::pipeline {

std::vector<PipelineAction> stage_schedule(ScheduleKind kind, int stages, int stage, int micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1) {
    throw std::invalid_argument(
        fmt::format("pipeline schedule: stage {} of {} with {} micro-batches", stage, stages, micro_batches));
  }
  using Pass = PipelineAction::Pass;
  std::vector<PipelineAction> actions;
  actions.reserve(2 * static_cast<std::size_t>(micro_batches));
  if (kind == ScheduleKind::GPipe) {
    for (int m = 0; m < micro_batches; ++m) actions.push_back({Pass::Forward, m});
    for (int m = 0; m < micro_batches; ++m) actions.push_back({Pass::Backward, m});
    return actions;
  }
  const int warmup = std::min(stages - 1 - stage, micro_batches);
  for (int m = 0; m < warmup; ++m) actions.push_back({Pass::Forward, m});
  int backward = 0;
  for (int m = warmup; m < micro_batches; ++m) {
    actions.push_back({Pass::Forward, m});
    actions.push_back({Pass::Backward, backward++});
  }
  while (backward < micro_batches) actions.push_back({Pass::Backward, backward++});
  return actions;
}

int peak_held_micro_batches(const std::vector<PipelineAction>& actions) {
  int held = 0;
  int peak = 0;
  for (const auto& a : actions) {
    held += a.pass == PipelineAction::Pass::Forward ? 1 : -1;
    peak = std::max(peak, held);
  }
  return peak;
}

double expected_idle_fraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

double replay_schedule(ScheduleKind kind, const std::vector<std::vector<double>>& forward,
                       const std::vector<std::vector<double>>& backward) {
  const int stages = static_cast<int>(forward.size());
  const int micro_batches = stages > 0 ? static_cast<int>(forward.front().size()) : 0;
  bool shaped = stages > 0 && micro_batches > 0 && backward.size() == forward.size();
  for (int s = 0; shaped && s < stages; ++s) {
    shaped = static_cast<int>(forward[s].size()) == micro_batches &&
             static_cast<int>(backward[s].size()) == micro_batches;
  }
  if (!shaped) {
    throw std::invalid_argument("pipeline replay: forward and backward times must be stages x micro-batches");
  }
  using Pass = PipelineAction::Pass;
  constexpr double kNotYet = -1.0;
  std::vector<std::vector<PipelineAction>> actions(stages);
  for (int s = 0; s < stages; ++s) actions[s] = stage_schedule(kind, stages, s, micro_batches);
  std::vector<std::vector<double>> forward_end(stages, std::vector<double>(micro_batches, kNotYet));
  std::vector<std::vector<double>> backward_end = forward_end;
  std::vector<std::size_t> next(stages, 0);
  std::vector<double> free_at(stages, 0.0);
  // Sweeps the stages, running each one's next actions while what they wait for has ended. Every
  // sweep runs at least one action of a valid schedule, so at most 2 S M sweeps.
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      for (; next[s] < actions[s].size(); ++next[s]) {
        const auto& a = actions[s][next[s]];
        const bool forward_pass = a.pass == Pass::Forward;
        double ready = 0.0;
        if (forward_pass && s > 0) ready = forward_end[s - 1][a.micro_batch];
        if (!forward_pass && s + 1 < stages) ready = backward_end[s + 1][a.micro_batch];
        if (ready < 0.0) break;  // kNotYet: what it waits for has not run
        const double start = std::max(free_at[s], ready);
        free_at[s] = start + (forward_pass ? forward : backward)[s][a.micro_batch];
        (forward_pass ? forward_end : backward_end)[s][a.micro_batch] = free_at[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (next[s] != actions[s].size()) {
      throw std::logic_error(fmt::format("pipeline replay: stage {}'s schedule waits on itself", s));
    }
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

}  // namespace dtrain::parallel::pipeline
