#include "dtrain/train/RunCallbacks.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/train/Trainer.h"

namespace dtrain::train {
namespace {

std::string describe(const EvalMetrics& m) {
  auto out = fmt::format("loss {:.4f} top1 {:.4f} top3 {:.4f} top5 {:.4f}", m.loss, m.top1, m.top3, m.top5);
  if (m.class_metrics) {
    out += fmt::format(" precision {:.4f} recall {:.4f} f1 {:.4f} mcc {:.4f}", m.precision, m.recall, m.f1,
                       m.mcc);
  }
  if (m.perplexity) out += fmt::format(" perplexity {:.2f}", *m.perplexity);
  return out;
}

void write_scalars(const io::MetricsSinkPtr& sink, std::int64_t step, std::int64_t epoch,
                   const std::map<std::string, double>& scalars) {
  if (!sink) return;
  io::MetricsRecord record;
  record.step = step;
  record.epoch = epoch;
  record.wall_time = io::wall_time_now();
  record.scalars.assign(scalars.begin(), scalars.end());
  sink->write(record);
}

// "<label>: min - max | " over the values, with `digits` decimals; "" for none.
std::string range(const char* label, const std::vector<double>& values, int digits) {
  if (values.empty()) return "";
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return fmt::format("{}: {:.{}f} - {:.{}f} | ", label, *lo, digits, *hi, digits);
}

// DiNNO's ranges line for an evaluation of nodes node0, node1, ... ("" when there are none):
// "| Consensus: a - b | Val Loss: a - b | Top1: a - b | Num Forward: n | Ep Range: a - b |".
std::string node_ranges(const EvalEvent& e) {
  std::vector<double> consensus, loss, top1, epoch;
  for (int i = 0; e.others.count("node" + std::to_string(i)); ++i) {
    const auto node = "node" + std::to_string(i);
    loss.push_back(e.others.at(node).loss);
    top1.push_back(e.others.at(node).top1);
    if (const auto c = e.strategy_metrics.find("consensus/" + node); c != e.strategy_metrics.end())
      consensus.push_back(c->second);
    if (const auto ep = e.strategy_metrics.find(node + "/epoch"); ep != e.strategy_metrics.end())
      epoch.push_back(ep->second);
  }
  if (loss.empty()) return "";
  std::string line =
      "| " + range("Consensus", consensus, 4) + range("Val Loss", loss, 4) + range("Top1", top1, 2);
  if (const auto f = e.strategy_metrics.find("forward_pass_count"); f != e.strategy_metrics.end())
    line += fmt::format("Num Forward: {:.0f} | ", f->second);
  line += range("Ep Range", epoch, 0);
  return line.substr(0, line.size() - 1);
}

}  // namespace

MetricsLog::MetricsLog(io::MetricsSinkPtr sink, std::shared_ptr<io::Logger> logger, std::int64_t every_steps,
                       bool log_evals)
    : sink_(std::move(sink)), logger_(std::move(logger)), every_(every_steps), log_evals_(log_evals) {}

void MetricsLog::on_train_begin(Trainer& trainer) {
  if (!logger_ || trainer.rank() != 0) return;
  logger_->info(
      fmt::format("model {}: {} parameters", trainer.config().model.name, trainer.model_facts().parameters));
  logger_->info(trainer.model_facts().summary);
  for (const auto& line : trainer.model_facts().transfer) logger_->info(line);
  if (!trainer.model_facts().recomputation.empty()) logger_->info(trainer.model_facts().recomputation);
  if (trainer.model_facts().memory.state.total() > 0)
    logger_->info(trainer.model_facts().memory.describe(trainer.rank()));
  logger_->info(fmt::format(
      "strategy {} on {} rank(s), {} steps ({} per epoch), starting at step {}, precision {}",
      trainer.strategy().name(), trainer.world_size(), trainer.total_steps(), trainer.steps_per_epoch(),
      trainer.step(), config::kPrecisionNames.name(trainer.config().train.precision)));
}

void MetricsLog::on_step_end(Trainer& trainer, const StepEvent& e) {
  // How the strategy set itself up (settled within its first steps): logged when it changes.
  if (logger_ && trainer.rank() == 0) {
    auto notes = trainer.strategy().notes();
    if (notes != logged_notes_) {
      for (const auto& [name, note] : notes) {
        const auto old = logged_notes_.find(name);
        if (old == logged_notes_.end() || old->second != note)
          logger_->info(fmt::format("{}: {}", name, note));
      }
      logged_notes_ = std::move(notes);
    }
  }
  loss_sum_.add(e.loss);
  skipped_.add(e.skipped);
  loss_scale_ = e.loss_scale;
  if (steps_ == 0) first_step_ = e.step;
  seconds_ += e.step_seconds;
  timing_ += e.timing;
  bytes_ += e.bytes_sent;
  samples_ += e.samples;
  steps_ += 1;
  if (every_ <= 0 || e.step % every_ != 0) return;
  const double n = static_cast<double>(steps_);
  report_skipped(trainer, e.step);
  std::map<std::string, double> scalars{
      {"train/loss", loss_sum_.take() / n},
      {"train/lr", e.lr},
      {"train/samples_per_s", seconds_ > 0 ? samples_ / seconds_ : 0.0},
      {"time/step_s", seconds_ / n},
      {"time/forward_s", timing_.forward / n},
      {"time/backward_s", timing_.backward / n},
      {"time/comm_s", timing_.communication / n},
      {"time/update_s", timing_.update / n},
      {"comm/bytes_per_step", static_cast<double>(bytes_) / n},
  };
  if (e.loss_scale > 0.0) scalars["train/loss_scale"] = e.loss_scale;
  if (trainer.rank() == 0) {
    // Epochs are numbered from 1 in every record and line: a step of the first epoch, that epoch's
    // end and the evaluation after it all say epoch 1.
    write_scalars(sink_, e.step, e.epoch + 1, scalars);
    if (logger_) {
      logger_->info(fmt::format(
          "step {}/{} epoch {} loss {:.4f} lr {:.5g} {:.0f} samples/s forward {:.2f} ms backward {:.2f} ms "
          "comm {:.2f} ms update {:.2f} ms sent {:.0f} B/step",
          e.step, trainer.total_steps(), e.epoch + 1, scalars.at("train/loss"), e.lr,
          scalars.at("train/samples_per_s"), 1e3 * timing_.forward / n, 1e3 * timing_.backward / n,
          1e3 * timing_.communication / n, 1e3 * timing_.update / n, scalars.at("comm/bytes_per_step")));
    }
  }
  seconds_ = 0;
  timing_ = {};
  bytes_ = 0;
  samples_ = steps_ = 0;
}

void MetricsLog::on_evaluation(Trainer& trainer, const EvalEvent& e) {
  if (logger_) {
    const auto say = [&](const std::string& line) {
      log_evals_ ? logger_->info(line) : logger_->info_file_only(line);
    };
    say(fmt::format("eval at step {}: {}", e.step, describe(e.metrics)));
    // Graph nodes: DiNNO's one line of ranges over the nodes; their own figures and the pairwise
    // distances (names with a '/') go to metrics.jsonl only.
    const auto ranges = node_ranges(e);
    if (ranges.empty()) {
      for (const auto& [name, m] : e.others)
        say(fmt::format("eval of {} at step {}: {}", name, e.step, describe(m)));
    } else {
      say(fmt::format("round {} {}", e.step, ranges));
    }
    for (const auto& [name, value] : e.strategy_metrics) {
      if (name.find('/') == std::string::npos) say(fmt::format("{} {:.6g}", name, value));
    }
  }
  if (trainer.rank() != 0) return;
  auto scalars = e.metrics.named("val/");
  for (const auto& [name, m] : e.others) {
    for (const auto& entry : m.named("val/" + name + "/")) scalars.insert(entry);
  }
  for (const auto& [name, value] : e.strategy_metrics) scalars["strategy/" + name] = value;
  write_scalars(sink_, e.step, e.epoch, scalars);
}

void MetricsLog::on_epoch_end(Trainer& trainer, const EpochEvent& e) {
  if (trainer.rank() != 0) return;
  auto scalars = e.train.named("train_epoch/");
  scalars["time/epoch_s"] = e.seconds;
  write_scalars(sink_, e.step, e.epoch + 1, scalars);
  if (logger_)
    logger_->info(
        fmt::format("epoch {} done in {:.1f} s: train {}", e.epoch + 1, e.seconds, describe(e.train)));
  if (sink_) sink_->flush();
}

void MetricsLog::report_skipped(Trainer& trainer, std::int64_t last_step) {
  // Every rank skipped the same steps (the strategy agreed on each); rank 0 says so.
  const auto skipped = std::llround(skipped_.take());
  if (skipped == 0 || !logger_ || trainer.rank() != 0) return;
  logger_->info(fmt::format("gradient overflow: skipped {} of steps {}-{}, loss scale → {}", skipped,
                            first_step_, last_step, loss_scale_.value()));
}

void MetricsLog::on_train_end(Trainer& trainer, const TrainResult& r) {
  if (sink_) sink_->flush();
  if (steps_ > 0) report_skipped(trainer, r.steps);
  if (!logger_ || trainer.rank() != 0) return;
  if (r.stopped_early) logger_->info("stopped early: " + r.stop_reason);
  logger_->info(fmt::format("done: {} steps, {:.0f} samples/s, final {}", r.steps, r.samples_per_second,
                            describe(r.final_eval)));
}

Progress::Progress(std::shared_ptr<io::Console> console) : console_(std::move(console)) {}

void Progress::on_train_begin(Trainer& trainer) {
  if (trainer.rank() != 0 || !console_) return;
  io::ProgressBarOptions options;
  options.total_steps = trainer.total_steps() - trainer.step();
  options.label = trainer.config().name;
  first_step_ = trainer.step();
  bar_ = std::make_unique<io::ProgressBar>(console_, options);
}

void Progress::on_step_end(Trainer&, const StepEvent& e) {
  if (bar_) bar_->update(e.step - first_step_, [loss = e.loss] { return loss.value(); });
}

void Progress::on_train_end(Trainer&, const TrainResult&) {
  if (bar_) bar_->finish();
  bar_.reset();
}

Checkpointing::Checkpointing(std::filesystem::path dir, std::filesystem::path export_path,
                             CheckpointOptions options, std::shared_ptr<io::Logger> logger)
    : store_(std::move(dir), io::CheckpointStoreOptions{options.keep}),
      export_path_(std::move(export_path)),
      options_(options),
      logger_(std::move(logger)) {}

void Checkpointing::save(Trainer& trainer) {
  if (trainer.step() == last_saved_step_) return;
  io::Checkpoint checkpoint;
  trainer.save_state(checkpoint);  // collective
  last_saved_step_ = trainer.step();
  if (trainer.rank() != 0) return;
  const auto path = store_.save(checkpoint, trainer.step());
  if (logger_) logger_->info("checkpoint " + path.string());
}

void Checkpointing::on_step_end(Trainer& trainer, const StepEvent& e) {
  if (options_.every_steps > 0 && e.step % options_.every_steps == 0) save(trainer);
}

void Checkpointing::on_epoch_end(Trainer& trainer, const EpochEvent& e) {
  if (options_.every_epochs > 0 && (e.epoch + 1) % options_.every_epochs == 0) save(trainer);
}

void Checkpointing::on_train_end(Trainer& trainer, const TrainResult&) {
  if (options_.at_end) save(trainer);
  if (export_path_.empty()) return;
  const auto weights = trainer.strategy().model_state();  // collective for sharded strategies
  if (trainer.rank() != 0) return;
  io::export_state_dict(export_path_, weights);
  if (logger_) logger_->info("weights exported for torch.load: " + export_path_.string());
}

}  // namespace dtrain::train
