// The pipeline's own figures: idle fractions measured three ways (blocked in receives, over the
// schedule, and over a replay of the schedule with this run's pass times and free transfers), the
// busiest stage, the micro-batches held; and the notes that put them in one log line.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "dtrain/parallel/pipeline/PipelineStrategy.h"

namespace dtrain::parallel::pipeline {

// Note [Replaying the schedule] (PipelineSchedule.h) in the strategy: every rank keeps its
// stage's pass times of the steps after the first; every kReplayValues of them (and in
// metrics()) the ranks all-gather them and each replays every pipeline's schedule of every
// step, summing the spans. Every rank runs the same steps with the same micro-batches, so the
// lengths agree. pipeline/replay_idle_fraction/stage<s> is 1 - the stage's compute over those
// spans: the idle fraction these passes allow, unequal stages and a slow pass included, with
// free transfers. pipeline/schedule_over_replay is the schedule time measured over it: what the
// transfers, the waiting for them and the bookkeeping between passes add (1 if nothing).
void PipelineStrategy::replay_recorded() {
  const int stages = layout_.stages;
  const auto per_step = 2 * static_cast<std::size_t>(options_.micro_batches);
  const auto per_rank = static_cast<std::int64_t>(recorded_passes_.size());
  auto local = torch::tensor(recorded_passes_, torch::kDouble);
  auto all = torch::empty({per_rank * world_->size()}, torch::kDouble);
  world_->allgather(local, all);
  recorded_passes_.clear();
  const auto a = all.accessor<double, 1>();
  const auto steps = static_cast<std::size_t>(per_rank) / per_step;
  const int micro_batches = options_.micro_batches;
  std::vector<std::vector<double>> forward(stages, std::vector<double>(micro_batches));
  auto backward = forward;
  for (int replica = 0; replica < world_->size() / stages; ++replica) {
    for (std::size_t step = 0; step < steps; ++step) {
      for (int s = 0; s < stages; ++s) {
        const auto at = static_cast<std::int64_t>(
            layout_.rank_of(replica, s) * static_cast<std::size_t>(per_rank) + step * per_step);
        for (int m = 0; m < micro_batches; ++m) {
          forward[s][m] = a[at + m];
          backward[s][m] = a[at + micro_batches + m];
        }
      }
      replay_seconds_ += replay_schedule(schedule_, forward, backward);
    }
  }
}

// Note [Measuring the bubble]
// GPipe's (S-1)/(M+S-1) is the share of the schedule's time a stage computes nothing, with equal
// stages and free transfers. pipeline/idle_fraction counts only the time a stage blocks in a
// receive, over the whole step: it misses the last stage's share at the end of the schedule (it
// has finished its backward passes and waits for the first stage's in the loss's all-reduce,
// which is not a receive) and dilutes every stage's with the step's other work (gathering the
// batch, the all-reduces, the optimizer). pipeline/schedule_idle_fraction is the formula's own
// quantity: 1 - the stage's forward and backward computation over the pipeline's schedule time,
// the longest of its stages' (the stages start together: the step's batch sizes are all-gathered
// just before), so transfer time and waiting count as idle wherever they fall.
// pipeline/compute_imbalance is the busiest stage's computation over the stages' mean (1 when they
// compute alike): GPipe's formula assumes 1. Above it, a heavier cut or a slower core (a VM's
// virtual CPUs differ by up to 22% on the same matrix product) sets the pace, and the others wait
// for it; the log's note names that stage.
std::map<std::string, double> PipelineStrategy::metrics() {
  if (!recorded_passes_.empty()) replay_recorded();
  constexpr int kFields = 5;
  auto local = torch::tensor(
      {idle_seconds_, step_seconds_, static_cast<double>(peak_held_), busy_seconds_, schedule_seconds_},
      torch::kDouble);
  auto all = torch::empty({kFields * world_->size()}, torch::kDouble);
  world_->allgather(local, all);
  const int stages = layout_.stages;
  const int replicas = world_->size() / stages;
  std::vector<double> idle(stages, 0.0), total(stages, 0.0), busy(stages, 0.0);
  std::vector<double> schedule(replicas, 0.0);  // per replica: its longest stage's schedule time
  stage_peak_held_.assign(stages, 0.0);
  auto a = all.accessor<double, 1>();
  for (int r = 0; r < world_->size(); ++r) {
    const int s = layout_.stage_of(r);
    idle[s] += a[kFields * r];
    total[s] += a[kFields * r + 1];
    stage_peak_held_[s] = std::max(stage_peak_held_[s], a[kFields * r + 2]);
    busy[s] += a[kFields * r + 3];
    schedule[layout_.replica_of(r)] = std::max(schedule[layout_.replica_of(r)], a[kFields * r + 4]);
  }
  double schedule_total = 0.0;
  for (const double t : schedule) schedule_total += t;
  std::map<std::string, double> out;
  stage_idle_fraction_.assign(stages, 0.0);
  replay_idle_fraction_.assign(stages, 0.0);
  schedule_idle_fraction_.assign(stages, 0.0);
  for (int s = 0; s < stages; ++s) {
    stage_idle_fraction_[s] = total[s] > 0.0 ? idle[s] / total[s] : 0.0;
    out[fmt::format("pipeline/idle_fraction/stage{}", s)] = stage_idle_fraction_[s];
    schedule_idle_fraction_[s] = schedule_total > 0.0 ? 1.0 - busy[s] / schedule_total : 0.0;
    out[fmt::format("pipeline/schedule_idle_fraction/stage{}", s)] = schedule_idle_fraction_[s];
    replay_idle_fraction_[s] = replay_seconds_ > 0.0 ? 1.0 - busy[s] / replay_seconds_ : 0.0;
    out[fmt::format("pipeline/replay_idle_fraction/stage{}", s)] = replay_idle_fraction_[s];
    out[fmt::format("pipeline/peak_micro_batches/stage{}", s)] = stage_peak_held_[s];
  }
  out["pipeline/expected_idle_fraction"] = expected_idle_fraction(stages, options_.micro_batches);
  const double mean_busy = std::accumulate(busy.begin(), busy.end(), 0.0) / static_cast<double>(stages);
  busiest_stage_ = static_cast<int>(std::max_element(busy.begin(), busy.end()) - busy.begin());
  compute_imbalance_ = mean_busy > 0.0 ? busy[busiest_stage_] / mean_busy : 0.0;
  out["pipeline/compute_imbalance"] = compute_imbalance_;
  schedule_over_replay_ = replay_seconds_ > 0.0 ? schedule_total / replay_seconds_ : 0.0;
  out["pipeline/schedule_over_replay"] = schedule_over_replay_;
  return out;
}

std::map<std::string, std::string> PipelineStrategy::notes() const {
  std::map<std::string, std::string> out;
  out["pipeline/stages"] = fmt::format(
      "{} x {} stages ({}, {} micro-batches, balance {}{}): {}", layout_.replicas, layout_.stages,
      kScheduleNames.name(schedule_), options_.micro_batches, kBalanceNames.name(options_.balance),
      layout_.shards > 1
          ? fmt::format(", gradients and optimizer state sharded over dp_shard {}", layout_.shards)
          : std::string(),
      describe_bounds(layout_.bounds, parameter_counts_));
  if (!stage_idle_fraction_.empty()) {
    std::vector<std::string> parts;
    for (std::size_t s = 0; s < stage_idle_fraction_.size(); ++s) {
      // Each figure by its own name (Note [Measuring the bubble]): the schedule's idle share is the
      // one GPipe's formula predicts; the wait in receives is part of it, over the whole step.
      parts.push_back(fmt::format(
          "stage {} idle {:.3f} of the schedule (schedule_idle_fraction), waiting in receives {:.3f} of the "
          "step "
          "(idle_fraction), peak {} micro-batches held",
          s, schedule_idle_fraction_[s], stage_idle_fraction_[s], static_cast<int>(stage_peak_held_[s])));
    }
    out["pipeline/idle"] =
        fmt::format("{}; expected idle of the schedule (S-1)/(M+S-1) = {:.3f}", fmt::join(parts, "; "),
                    expected_idle_fraction(layout_.stages, options_.micro_batches));
    if (schedule_over_replay_ > 0.0) {
      double mean = 0.0;
      for (const double f : replay_idle_fraction_)
        mean += f / static_cast<double>(replay_idle_fraction_.size());
      out["pipeline/idle"] += fmt::format(
          "; replayed with these passes and free transfers: idle {:.3f} a stage on average, the schedule "
          "{:.3f}x "
          "the replay",
          mean, schedule_over_replay_);
    }
    if (compute_imbalance_ > 0.0 && layout_.stages > 1) {
      out["pipeline/idle"] += fmt::format(
          "; stage {} computes the most, {:.3f}x the stages' mean (GPipe's formula assumes 1; above it a "
          "heavier cut or a slower core sets the pace: compare parallel.pipeline.balance: time)",
          busiest_stage_, compute_imbalance_);
    }
  }
  return out;
}

}  // namespace dtrain::parallel::pipeline
