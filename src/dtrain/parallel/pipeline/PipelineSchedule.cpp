// See PipelineSchedule.h and Note [Pipeline schedules].
#include "dtrain/parallel/pipeline/PipelineSchedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace dtrain::parallel::pipeline {

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  throw std::invalid_argument(
      fmt::format("parallel.pipeline.schedule: expected gpipe or 1f1b, found '{}'", name));
}

std::string schedule_name(ScheduleKind kind) {
  return kind == ScheduleKind::GPipe ? "gpipe" : "1f1b";
}

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

}  // namespace dtrain::parallel::pipeline
