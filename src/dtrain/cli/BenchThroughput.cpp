// `dtrain bench throughput`: expands the sweep into an experiment whose runs are its points, runs it
// through experiment::run_experiment (each point's workers re-run this binary with one item per list
// and --worker-out), and turns the ranks' reports into the distributed-training study's tables. A
// worker is a short `dtrain train`: the Trainer over the registered strategy, on synthetic data of
// the model's input shape.
#include "dtrain/cli/BenchThroughput.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "dtrain/cli/Commands.h"
#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/config/Environment.h"
#include "dtrain/config/Overrides.h"
#include "dtrain/config/Registry.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"
#include "dtrain/experiment/Experiment.h"
#include "dtrain/experiment/ScratchFolder.h"
#include "dtrain/io/JsonFile.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/run/SelfExe.h"
#include "dtrain/run/WorkerLaunch.h"
#include "dtrain/train/Trainer.h"

namespace dtrain::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSource = "dtrain bench throughput";

// Keys every point sets from the sweep's own flags: an override of one would be overwritten.
const std::vector<std::pair<std::string, std::string>> kSweptKeys{
    {"model.name", "--models"},
    {"data.batch_size", "--batches"},
    {"train.precision", "--precisions"},
    {"nproc", "--workers"},
    {"parallel.strategy", "--strategies"},
    {"train.max_steps", "--steps and --warmup"}};

// Models that take CIFAR-shaped images (the distributed-training study's resnets; the transformer classifies
// image rows); the others are the MNIST-shaped nets. data.synthetic_shape in --set overrides either.
bool cifar_shaped(const std::string& model) {
  return model == "resnet18" || model == "resnet50" || model == "vit" || model == "transformer";
}

// The first line of an error, for a table cell (LibTorch's errors carry their stack trace after it).
std::string one_line(const std::string& text) {
  const auto end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

// The option sections a strategy reads: its own (or the one it shares) and the extra ones.
std::vector<std::string> sections_of(const parallel::StrategyInfo& info) {
  std::vector<std::string> sections = info.extra_sections;
  if (!info.options_section.empty()) sections.push_back(info.options_section);
  return sections;
}

// "parallel.zero.stage" -> "zero" when zero is some registered strategy's option section; "" for
// keys outside every strategy's section (parallel.backend, optim.lr, ...).
std::string strategy_section_of(const std::string& key) {
  const std::string prefix = "parallel.";
  if (key.rfind(prefix, 0) != 0) return "";
  const auto dot = key.find('.', prefix.size());
  const auto section =
      key.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
  for (const auto& info : parallel::registered_strategies()) {
    const auto sections = sections_of(info);
    if (std::find(sections.begin(), sections.end(), section) != sections.end()) return section;
  }
  return "";
}

// The --set overrides that apply to `strategy`: all but those of another strategy's section.
std::vector<std::string> overrides_for(const BenchThroughputOptions& o, const std::string& strategy) {
  const auto sections = sections_of(parallel::find_strategy(strategy));
  std::vector<std::string> out;
  for (const auto& text : o.set) {
    const auto section = strategy_section_of(config::parse_override(text).key);
    if (section.empty() || std::find(sections.begin(), sections.end(), section) != sections.end()) {
      out.push_back(text);
    }
  }
  return out;
}

bool sets_key(const std::vector<std::string>& overrides, const std::string& key) {
  for (const auto& text : overrides) {
    const auto given = config::parse_override(text).key;
    if (given == key || key.rfind(given + ".", 0) == 0) return true;
  }
  return false;
}

// The worker's command line: this point alone, with the overrides that apply to its strategy.
std::vector<std::string> worker_command(const BenchThroughputOptions& o, const ThroughputPoint& p,
                                        const fs::path& out) {
  std::vector<std::string> command{run::self_executable(),
                                   "bench",
                                   "throughput",
                                   "--models",
                                   p.model,
                                   "--batches",
                                   std::to_string(p.batch),
                                   "--precisions",
                                   p.precision,
                                   "--workers",
                                   std::to_string(p.workers),
                                   "--strategies",
                                   p.strategy,
                                   "--steps",
                                   std::to_string(o.steps),
                                   "--warmup",
                                   std::to_string(o.warmup)};
  for (const auto& text : overrides_for(o, p.strategy)) command.insert(command.end(), {"--set", text});
  command.insert(command.end(), {"--worker-out", out.string()});
  return command;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// How point `p`'s workers ended, from their rank<r>.json in `dir`; a failure that left no report
// takes the launcher's account of the failing rank as its reason.
ThroughputResult read_point(const BenchThroughputOptions& o, const ThroughputPoint& p, const fs::path& dir,
                            const launch::LaunchResult& launched) {
  if (launched.signal) {
    throw std::runtime_error(fmt::format("bench throughput: stopped by signal {}", *launched.signal));
  }
  std::vector<std::string> reports;
  for (int rank = 0; rank < p.workers; ++rank) {
    reports.push_back(read_text(dir / fmt::format("rank{}.json", rank)));
  }
  auto result = combine_reports(p, o.steps, o.warmup, reports);
  if (result.status == "failed" && result.reason.rfind("rank ", 0) == 0 && !launched.failure.empty()) {
    result.reason = one_line(launched.failure);
  }
  return result;
}

// Records each timed step's wall time on this rank and the samples of the whole job in it.
class StepTimes : public train::Callback {
 public:
  explicit StepTimes(int warmup) : warmup_(warmup) {}
  void on_step_end(train::Trainer&, const train::StepEvent& event) override {
    if (event.step <= warmup_) return;
    seconds.push_back(event.step_seconds);
    samples.push_back(event.samples);
  }
  std::vector<double> seconds;
  std::vector<std::int64_t> samples;

 private:
  int warmup_;
};

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace

std::vector<std::string> parse_name_list(const std::string& flag, const std::string& list) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const auto item = list.substr(start, comma - start);
    if (item.empty() || item.find_first_of(" \t") != std::string::npos) {
      throw std::invalid_argument(
          fmt::format("{}: '{}' has an empty or blank item; give names separated by commas, e.g. {} a,b",
                      flag, list, flag));
    }
    items.push_back(item);
    start = comma + 1;
  }
  return items;
}

std::vector<int> parse_count_list(const std::string& flag, const std::string& list) {
  std::vector<int> counts;
  for (const auto& item : parse_name_list(flag, list)) {
    const bool digits =
        std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); });
    const long long value = digits && item.size() <= 9 ? std::stoll(item) : 0;
    if (value < 1) {
      throw std::invalid_argument(fmt::format(
          "{}: '{}' is not a whole number of at least 1; give numbers separated by commas, e.g. {} 1,2", flag,
          item, flag));
    }
    counts.push_back(static_cast<int>(value));
  }
  return counts;
}

namespace {

// Every point's configuration reads, so that a bad --set stops the sweep before its first run; so
// does a model key that no point's model reads.
void check_points_read(const BenchThroughputOptions& o, const std::vector<ThroughputPoint>& points) {
  std::set<std::string> kept;
  std::map<std::string, std::string> left_out;  // key -> the model of the first point without it
  for (const auto& p : points) {
    config::GridModelKeys keys;
    point_config(o, p, &keys);
    kept.insert(keys.kept.begin(), keys.kept.end());
    for (const auto& key : keys.left_out) left_out.emplace(key, p.model);
  }
  for (const auto& [key, model] : left_out) {
    if (kept.count(key)) continue;
    throw std::invalid_argument(fmt::format("--set {}: {}; no model of the sweep reads it", key,
                                            config::model_key_unused(model, key.substr(6))));
  }
}

}  // namespace

std::vector<ThroughputPoint> expand_points(const BenchThroughputOptions& o) {
  if (o.steps < 1) throw std::invalid_argument(fmt::format("--steps must be at least 1; found {}", o.steps));
  if (o.warmup < 0)
    throw std::invalid_argument(fmt::format("--warmup must be at least 0; found {}", o.warmup));

  std::vector<std::string> models;
  const auto& registered_models = config::registered_choices("model.name");
  for (const auto& name : parse_name_list("--models", o.models)) {
    const auto canonical = registered_models.resolve(name);
    if (!canonical) {
      throw std::invalid_argument(
          fmt::format("--models: unknown model '{}'; choose among {}", name, registered_models.list()));
    }
    models.push_back(*canonical);
  }
  const auto batches = parse_count_list("--batches", o.batches);
  const auto workers = parse_count_list("--workers", o.workers);
  for (const int w : workers) {
    try {
      launch::check_local_workers(w, /*oversubscribe=*/false);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("--workers: {}", e.what()));
    }
  }
  std::vector<std::string> precisions;
  for (const auto& name : parse_name_list("--precisions", o.precisions)) {
    try {
      precisions.push_back(config::kPrecisionNames.name(
          config::parse_run_config("", kSource, {"train.precision=" + name}).train.precision));
    } catch (const std::exception& e) {
      throw std::invalid_argument(fmt::format("--precisions: '{}': {}", name, one_line(e.what())));
    }
  }
  std::vector<std::string> strategies;
  for (const auto& name : parse_name_list("--strategies", o.strategies)) {
    try {
      strategies.push_back(parallel::find_strategy(name).name);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("--strategies: {}", e.what()));
    }
  }

  for (const auto& override_ : config::parse_overrides(o.set)) {
    for (const auto& [key, flag] : kSweptKeys) {
      if (override_.key == key || key.rfind(override_.key + ".", 0) == 0) {
        throw std::invalid_argument(fmt::format("--set {}: the sweep sets {} for every point; use {} instead",
                                                override_.text, key, flag));
      }
    }
    const auto section = strategy_section_of(override_.key);
    if (section.empty()) continue;
    const bool read = std::any_of(strategies.begin(), strategies.end(), [&](const std::string& s) {
      const auto sections = sections_of(parallel::find_strategy(s));
      return std::find(sections.begin(), sections.end(), section) != sections.end();
    });
    if (!read) {
      throw std::invalid_argument(fmt::format(
          "--set {}: no strategy in --strategies ({}) reads parallel.{}.*; add one that does or leave it out",
          override_.text, fmt::join(strategies, ","), section));
    }
  }

  std::vector<ThroughputPoint> points;
  for (const auto& model : models) {
    for (const int batch : batches) {
      for (const auto& precision : precisions) {
        for (const int w : workers) {
          for (const auto& strategy : strategies) points.push_back({model, batch, precision, w, strategy});
        }
      }
    }
  }
  check_points_read(o, points);
  return points;
}

std::vector<std::string> point_overrides(const BenchThroughputOptions& o, const ThroughputPoint& p) {
  const auto user = overrides_for(o, p.strategy);
  std::vector<std::string> overrides{
      "name=bench_throughput",
      "data.dataset=synthetic",
      cifar_shaped(p.model) ? "data.synthetic_shape=[3,32,32]" : "data.synthetic_shape=[1,28,28]",
      "data.synthetic_classes=10",
      fmt::format("data.test_subset_size={}", p.batch),
      fmt::format("data.eval_batch_size={}", p.batch),
      "model.name=" + p.model,
      fmt::format("data.batch_size={}", p.batch),
      "train.precision=" + p.precision,
      "parallel.strategy=" + p.strategy,
      fmt::format("nproc={}", p.workers),
      "train.epochs=1000",
      fmt::format("train.max_steps={}", o.warmup + o.steps),
      "train.eval_every_epochs=0",
      "train.checkpoint_every_epochs=0",
  };
  // SGD with momentum, as the distributed-training study's CIFAR scripts; another optimizer takes none of its
  // momentum.
  if (!sets_key(user, "optim.name"))
    overrides.insert(overrides.end(), {"optim.name=sgd", "optim.momentum=0.9"});
  overrides.insert(overrides.end(), user.begin(), user.end());
  config::GridModelKeys model_keys;  // --set's model keys apply to the points whose model reads them
  const auto cfg = config::parse_grid_run_config("", kSource, overrides, model_keys);
  if (cfg.data.dataset == "synthetic" && !sets_key(user, "data.synthetic_size")) {
    // One epoch holds every step on each data holder (ranks, or graph nodes), so no epoch end
    // falls between timed steps; at least 5 batches, since the test set is a fifth of it.
    int holders = p.workers;
    try {
      holders = parallel::data_holders(cfg.parallel, p.workers);
    } catch (const std::invalid_argument&) {
      // The experiment refuses this point before its workers start (ExperimentOptions::keep_going).
    }
    overrides.push_back(fmt::format("data.synthetic_size={}", static_cast<std::int64_t>(p.batch) * holders *
                                                                  std::max(5, o.warmup + o.steps)));
  }
  return overrides;
}

// --set's model keys apply to the points whose model reads them; `model_keys` says which were kept.
config::RunConfig point_config(const BenchThroughputOptions& o, const ThroughputPoint& p,
                               config::GridModelKeys* model_keys) {
  config::GridModelKeys keys;
  return config::parse_grid_run_config("", kSource, point_overrides(o, p), model_keys ? *model_keys : keys);
}

experiment::ExperimentSpec sweep_experiment(const BenchThroughputOptions& o,
                                            const std::vector<ThroughputPoint>& points) {
  experiment::ExperimentSpec spec;
  spec.name = "bench_throughput";
  for (std::size_t i = 0; i < points.size(); ++i) {
    spec.runs.push_back({fmt::format("point{:03d}", i), point_overrides(o, points[i])});
  }
  return spec;
}

std::vector<ThroughputResult> run_throughput_sweep(const BenchThroughputOptions& o, std::ostream& json_out,
                                                   std::ostream& log) {
  const auto points = expand_points(o);
  // The ranks' reports, read once the point is done.
  experiment::ScratchFolder folder("dtrain-bench-", "bench throughput");
  experiment::ExperimentOptions options;
  options.directory = folder.path();
  options.keep_going = true;  // a refused or failed point is a cell of the table
  // The workers' output and the launcher's reports go to a file: the reason of a refusal is in
  // the ranks' reports, and the bench's own output stays the table.
  options.workers_output_to_file = true;
  options.worker_command = [&](std::size_t i, const experiment::RunSpec&, const fs::path& dir) {
    return worker_command(o, points[i], dir);
  };
  // The point's result as its ranks reported it; none when the experiment refused the point
  // before its workers started.
  std::optional<ThroughputResult> measured;
  options.read_outcome = [&](std::size_t i, const fs::path& dir, const launch::LaunchResult& launched) {
    measured = read_point(o, points[i], dir, launched);
    return experiment::RunOutcome{measured->status, measured->reason,
                                  nlohmann::json::parse(to_json_line(*measured))};
  };
  options.before_run = [&](std::size_t i, const experiment::RunSpec&) {
    const auto& p = points[i];
    log << fmt::format("[{}/{}] {} batch {} {} workers {} {}\n", i + 1, points.size(), p.model, p.batch,
                       p.precision, p.workers, p.strategy)
        << std::flush;
  };
  std::vector<ThroughputResult> results;
  options.after_run = [&](std::size_t i, const experiment::RunSpec&, const experiment::RunOutcome& outcome) {
    ThroughputResult result;
    if (measured) {
      result = std::move(*measured);
      measured.reset();
    } else {
      result.point = points[i];
      result.steps = o.steps;
      result.warmup = o.warmup;
      result.status = outcome.status;
      result.reason = outcome.reason;
    }
    if (result.status != "ok") log << fmt::format("  {}: {}\n", result.status, result.reason) << std::flush;
    json_out << to_json_line(result) << std::endl;
    results.push_back(std::move(result));
  };
  experiment::run_experiment(sweep_experiment(o, points), options);
  return results;
}

int run_throughput_worker(const BenchThroughputOptions& o) {
  const auto points = expand_points(o);
  if (points.size() != 1) {
    throw std::invalid_argument(
        fmt::format("--worker-out: a worker runs one point, but the lists give {}; it is for bench "
                    "throughput's own workers",
                    points.size()));
  }
  const auto& p = points.front();
  const auto cfg = point_config(o, p);
  comm::RendezvousOptions rv;
  rv.timeout = run::rendezvous_timeout(cfg);
  const auto rendezvous = comm::resolve_rendezvous(rv, config::process_environment());
  nlohmann::json report{{"rank", rendezvous.rank}};
  auto finish = [&](const std::string& status, const std::string& reason) {
    report["status"] = status;
    if (status != "ok") report["reason"] = one_line(reason);
    io::write_json_file(fs::path(o.worker_out) / fmt::format("rank{}.json", rendezvous.rank), report);
    return status == "ok" ? 0 : 1;
  };
  if (rendezvous.world_size != p.workers) {
    return finish("failed", fmt::format("started with {} ranks for a point of {} workers",
                                        rendezvous.world_size, p.workers));
  }

  comm::CommunicatorPtr communicator;
  try {
    communicator = run::connect_worker(cfg, rendezvous);
  } catch (const std::exception& e) {
    return finish("failed", one_line(e.what()));
  }
  // Building the trainer builds the strategy, which refuses what it cannot run (a world size, an
  // optimizer, a precision): the point is reported as refused with its reason.
  std::unique_ptr<train::Trainer> trainer;
  try {
    trainer = std::make_unique<train::Trainer>(cfg, communicator, rendezvous.local_rank,
                                               rendezvous.local_world_size);
  } catch (const std::exception& e) {
    return finish("refused", one_line(e.what()));
  }
  try {
    auto times = std::make_shared<StepTimes>(o.warmup);
    trainer->add_callback(times);
    trainer->fit();
    const auto footprint = trainer->strategy().memory_footprint();
    report["parameters"] = trainer->model_facts().parameters;
    report["step_seconds"] = times->seconds;
    report["samples"] = times->samples;
    report["parameters_bytes"] = footprint.parameters;
    report["gradients_bytes"] = footprint.gradients;
    report["optimizer_bytes"] = footprint.optimizer_state;
    report["peak_rss_bytes"] = peak_rss_bytes();
    // What the run predicted before its first step (parallel/MemoryPlan.h), beside what it held.
    const auto& plan = trainer->model_facts().memory;
    report["planned_state_bytes"] = plan.state.total();
    report["planned_peak_bytes"] = plan.peak();
  } catch (const std::exception& e) {
    return finish("failed", one_line(e.what()));
  }
  return finish("ok", "");
}

CLI::App* add_throughput_subcommand(CLI::App& bench, BenchThroughputOptions& o) {
  auto* cmd = bench.add_subcommand(
      "throughput",
      "Samples/s of short training runs over model x batch x precision x workers x strategy (the "
      "distributed-training study's tables), with each rank's peak resident memory and the bytes in "
      "parameters, gradients and optimizer "
      "state; one JSON object per point on stdout (or --json) and the tables on stderr (and --markdown)");
  cmd->add_option("--models", o.models, "Comma-separated model names (model.name)")->capture_default_str();
  cmd->add_option("--batches", o.batches, "Comma-separated batch sizes per worker")->capture_default_str();
  cmd->add_option("--precisions", o.precisions, "Comma-separated train.precision values: fp32, bf16, fp16")
      ->capture_default_str();
  cmd->add_option("--workers", o.workers, "Comma-separated numbers of local workers")->capture_default_str();
  cmd->add_option("--strategies", o.strategies, "Comma-separated registered strategies (parallel.strategy)")
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "Timed training steps per point")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed steps before them")->capture_default_str();
  cmd->add_option("--set", o.set,
                  "key=value override for every point (repeatable), e.g. --set optim.name=adam; a strategy's "
                  "own section (parallel.zero.stage=2) applies to that strategy's points only");
  cmd->add_option("--json", o.json, "Write the JSON lines into this file instead of stdout");
  cmd->add_option("--markdown", o.markdown, "Write the markdown tables into this file too");
  cmd->add_option("--worker-out", o.worker_out)->group("");  // bench throughput's own workers
  return cmd;
}

int run_throughput_command(const BenchThroughputOptions& o) {
  if (!o.worker_out.empty()) return run_throughput_worker(o);
  expand_points(o);  // every option checked before a file is touched
  std::ofstream json_file;
  if (!o.json.empty()) {
    json_file.open(o.json);
    if (!json_file) throw std::invalid_argument(fmt::format("--json {}: cannot write this file", o.json));
  }
  std::ofstream markdown_file;
  if (!o.markdown.empty()) {
    markdown_file.open(o.markdown);
    if (!markdown_file) {
      throw std::invalid_argument(fmt::format("--markdown {}: cannot write this file", o.markdown));
    }
  }
  const auto results = run_throughput_sweep(o, o.json.empty() ? std::cout : json_file, std::cerr);
  std::cerr << "\n";
  write_markdown(std::cerr, results);
  if (markdown_file.is_open()) write_markdown(markdown_file, results);
  const bool failed = std::any_of(results.begin(), results.end(),
                                  [](const ThroughputResult& r) { return r.status == "failed"; });
  return failed ? kExitFailure : kExitSuccess;
}

}  // namespace dtrain::cli
