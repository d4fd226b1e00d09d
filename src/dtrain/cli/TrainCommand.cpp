// `dtrain train [CONFIG] [key=value ...] [--nproc N]`: one training run from a YAML file, or from
// the dAD paper's flags without one (DadFlags.h). With --nproc (or the config's nproc) and no launcher
// around it, it starts the workers itself; started by dtrain launch, torchrun, mpirun or srun, or by
// hand with --rank, it is one worker of the job.
#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtrain/cli/Commands.h"
#include "dtrain/cli/DadFlags.h"
#include "dtrain/cli/ElasticWorker.h"
#include "dtrain/cli/Interrupt.h"
#include "dtrain/cli/Main.h"
#include "dtrain/cli/ResumeConfig.h"
#include "dtrain/cli/RunResults.h"
#include "dtrain/cli/SelfExe.h"
#include "dtrain/comm/Rendezvous.h"
#include "dtrain/comm/StoreSecret.h"
#include "dtrain/comm/Work.h"
#include "dtrain/config/Environment.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/experiment/WorkerLaunch.h"
#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/JsonFile.h"
#include "dtrain/io/RunDir.h"
#include "dtrain/io/TensorBoardWriter.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/optim/Optimizers.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/train/EarlyStop.h"
#include "dtrain/train/RunCallbacks.h"
#include "dtrain/train/Trainer.h"
#include "dtrain/util/Clock.h"

namespace dtrain::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  int nproc = 0;
  bool oversubscribe = false;
  std::string resume;
  std::string run_dir;
  std::string dist_url;
  int rank = -1;
  int world_size = -1;
  std::string master_addr;
  int master_port = -1;
  int max_restarts = 0;
  bool print_config = false;
  DadFlags dad_flags;
};

// The run folder --resume continues, where it is one (it has the config.yaml every run writes):
// the folder itself, its checkpoints/ folder, or one checkpoint in it.
std::optional<fs::path> resumed_run_folder(const TrainArgs& a) {
  if (a.resume.empty()) return std::nullopt;
  const fs::path resume(a.resume);
  const auto folder = fs::is_directory(resume / "checkpoints")
                          ? resume
                          : (fs::is_regular_file(resume) ? resume.parent_path() : resume).parent_path();
  if (!fs::is_regular_file(saved_config_path(folder))) return std::nullopt;
  return folder;
}

// CONFIG (without one, the dAD paper's defaults, or the resumed run's own config.yaml), then that
// paper's flags, then key=value overrides; on a resume, checked against the run's saved
// configuration (Note [What a resume may change]).
config::RunConfig load_config(const TrainArgs& a) {
  auto overrides = a.dad_flags.overrides();
  const auto given = config::parse_overrides(a.overrides);
  check_no_conflict(overrides, given);
  overrides.insert(overrides.end(), given.begin(), given.end());
  const auto resumed = resumed_run_folder(a);
  if (!resumed) {
    if (a.config.empty()) return config::run_config_from_text(kDadDefaults, kDadDefaultsSource, overrides);
    return config::run_config_from_file(a.config, overrides);
  }
  const auto saved_path = saved_config_path(*resumed);
  const auto cfg = a.config.empty() ? config::run_config_from_file(saved_path.string(), overrides)
                                    : config::run_config_from_file(a.config, overrides);
  (void)resume_changes(config::run_config_from_file(saved_path.string(), {}), cfg, saved_path);
  return cfg;
}

// CLI11 gives the first positional to CONFIG; without a file, a key=value (or a removal, ~key) there is
// an override.
void take_positionals(TrainArgs& a) {
  const bool override_like = a.config.find('=') != std::string::npos || a.config.rfind('~', 0) == 0;
  if (!override_like || fs::exists(a.config)) return;
  a.overrides.insert(a.overrides.begin(), a.config);
  a.config.clear();
}

// One worker of a job: its rendezvous is on the command line, or a launcher started it.
bool started_by_a_launcher(const comm::Environment& env, const TrainArgs& a) {
  if (a.rank >= 0 || !a.dist_url.empty()) return true;
  return comm::launcher_of(env) != comm::RendezvousSource::Default;
}

// A run folder or its checkpoints/ folder -> the latest checkpoint; a file -> itself.
io::Checkpoint load_resume_point(const fs::path& where) {
  if (fs::is_regular_file(where)) return io::Checkpoint::load(where);
  if (!fs::is_directory(where)) {
    throw std::invalid_argument(fmt::format("--resume {}: no such file or folder", where.string()));
  }
  const auto dir = fs::is_directory(where / "checkpoints") ? where / "checkpoints" : where;
  auto checkpoint = io::CheckpointStore(dir).load_latest();
  if (!checkpoint) {
    throw std::invalid_argument(
        fmt::format("--resume {}: no checkpoint in {}", where.string(), dir.string()));
  }
  return std::move(*checkpoint);
}

// Note [Resuming on another number of workers]
// A checkpoint holds everything by name (Note [Checkpoint layout]), so a run saved by N workers
// resumes on M, as torchrun's elastic restarts and DeepSpeed's universal checkpoints let a job
// continue at another size. What cannot carry over is the data partition: the epoch in progress
// finishes on the samples the N holders had left, each read once by the M (Note [An epoch across a
// size change] in data/EpochRemainder.h; the steps done recounted as M counts them), and the next
// epochs are cut over M anew, so the run goes on correctly but no longer matches an uninterrupted
// N-worker run sample for sample.
// That is said once, on rank 0, naming both sizes; a strategy whose data holders are graph nodes
// (decentralized) keeps its partition whatever the world size, and says nothing.
void warn_if_repartitioned(const nlohmann::json& meta, const train::Trainer& trainer,
                           const std::string& resume, io::Logger& logger) {
  if (!meta.contains("world_size")) return;
  const int saved_world = meta.at("world_size").get<int>();
  const int saved_holders = meta.value("data_holders", saved_world);
  if (saved_holders == trainer.data_holders()) return;
  logger.warning(fmt::format(
      "--resume {}: the checkpoint was written by {} worker(s), this run has {}: the epoch finishes on the "
      "samples it had left and the next ones are partitioned anew over {} (data_partition_hash changes); the "
      "run will not match an uninterrupted {}-worker run sample for sample (resume with --nproc {} for that)",
      resume, saved_world, trainer.world_size(), trainer.data_holders(), saved_world, saved_world));
}

// The run folder that --resume points into: the folder itself, its checkpoints/ folder, or one
// checkpoint file inside checkpoints/.
fs::path run_folder_of(const fs::path& resume) {
  if (fs::is_directory(resume / "checkpoints")) return resume;
  const auto checkpoints = fs::is_regular_file(resume) ? resume.parent_path() : resume;
  return checkpoints.parent_path();
}

// Whether --resume continues the run in `folder` (so a named run folder may exist already).
bool resumes_in(const TrainArgs& a, const fs::path& folder) {
  if (a.resume.empty() || !fs::exists(folder)) return false;
  std::error_code error;
  return fs::equivalent(run_folder_of(a.resume), folder, error);
}

// A new run folder for rank 0 of `world` ranks, in the layout the config names.
io::RunDir new_run_folder(const TrainArgs& a, const config::RunConfig& cfg, int world) {
  if (cfg.run_folder == "named") {
    return io::RunDir::create_named(cfg.out_dir, cfg.name, world,
                                    resumes_in(a, fs::path(cfg.out_dir) / cfg.name));
  }
  return io::RunDir::create(cfg.out_dir, cfg.name, world);
}

// Starts `nproc` local workers running this same command, each told the run folder.
int launch_workers(const TrainArgs& a, const config::RunConfig& cfg, int nproc,
                   const comm::Environment& env) {
  fs::path root;
  if (!a.run_dir.empty()) {
    root = a.run_dir;
  } else if (const auto resumed = resumed_run_folder(a)) {
    root = *resumed;
  } else if (!a.resume.empty()) {
    root = run_folder_of(a.resume);
  } else {
    root = new_run_folder(a, cfg, nproc).root();
  }
  auto options = experiment::worker_launch(cfg, nproc, root, env);
  options.max_restarts = a.max_restarts;
  options.oversubscribe = a.oversubscribe;
  // The workers read the configuration as this process did: the dAD paper's flags as the
  // overrides they stand for, validated here already.
  std::vector<std::string> overrides;
  for (const auto& o : a.dad_flags.overrides()) overrides.push_back(o.key + "=" + o.value);
  overrides.insert(overrides.end(), a.overrides.begin(), a.overrides.end());
  options.command = experiment::train_command(self_executable(), a.config, overrides, root, a.resume);
  // The launcher has reported a failure itself.
  return launch::launch(options).exit_code;
}

// The attempt of the job that this worker belongs to: 0, or the restarts before it
// (TORCHELASTIC_RESTART_COUNT, which dtrain launch and torchrun set, also through mpirun).
int restart_count(const comm::Environment& env) {
  const auto it = env.find("TORCHELASTIC_RESTART_COUNT");
  if (it == env.end() || it->second.empty() || it->second.size() > 6 ||
      it->second.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return std::stoi(it->second);
}

// Note [Restarts resume]
// A job restarted by its launcher (--max-restarts) continues where its run folder's latest
// checkpoint left it, as a resume does: the weights, the optimizer's and the scheduler's state,
// the random generators and the sampler's position all come back (Trainer::load_state), so the
// final weights equal an uninterrupted run's bit for bit. With no checkpoint yet the attempt
// starts over from step 0, or from --resume where one was given.
// Rank 0, which writes the checkpoints, decides for every rank: a rank on a host that does not see
// the folder then fails naming it instead of starting over alone.
TrainArgs resume_after_restart(const TrainArgs& a, const io::RunDir& run, int restarts,
                               const comm::CommunicatorPtr& communicator,
                               const std::shared_ptr<io::Logger>& logger) {
  if (restarts == 0) return a;
  TrainArgs resumed = a;
  auto found = torch::zeros({1}, torch::kInt64);
  if (!communicator || communicator->rank() == 0)
    found.fill_(io::CheckpointStore(run.checkpoints_dir()).latest_path() ? 1 : 0);
  if (communicator) communicator->broadcast(found, 0);
  if (found.item<std::int64_t>() == 1) {
    resumed.resume = run.root().string();
    logger->info(fmt::format("restart {}: continuing from the latest checkpoint in {}", restarts,
                             run.checkpoints_dir().string()));
  } else {
    logger->info(fmt::format("restart {}: no checkpoint in {} yet; starting {}", restarts,
                             run.checkpoints_dir().string(),
                             a.resume.empty() ? "from step 0" : "from --resume " + a.resume));
  }
  return resumed;
}

// The callbacks of a run: the metrics files (and TensorBoard's), made only once the inputs are read,
// so a run refused for its data leaves no empty metrics for `tensorboard --logdir runs` to list; the
// progress bar, checkpoints and the early stop.
void add_run_callbacks(train::Trainer& trainer, const config::RunConfig& cfg, const io::RunDir& run,
                       const std::shared_ptr<io::Logger>& logger, int rank) {
  io::MetricsSinkPtr sink;
  if (rank == 0) {
    sink = std::make_shared<io::MultiMetricsSink>(
        std::vector<io::MetricsSinkPtr>{std::make_shared<io::JsonlMetricsSink>(run.metrics_jsonl_path()),
                                        std::make_shared<io::CsvMetricsSink>(run.metrics_csv_path()),
                                        std::make_shared<io::TensorBoardWriter>(run.tensorboard_dir())});
  }
  if (!trainer.device().is_cpu()) {
    logger->info(fmt::format("rank {} trains on {} ({} CUDA device(s) visible)", rank, trainer.device().str(),
                             torch::cuda::device_count()));
  }
  trainer.add_callback(
      std::make_shared<train::MetricsLog>(sink, logger, cfg.train.log_every_steps, cfg.train.log_evals));
  if (rank == 0) trainer.add_callback(std::make_shared<train::Progress>(logger->console()));
  train::CheckpointOptions ckpt;
  ckpt.every_steps = cfg.train.checkpoint_every_steps;
  ckpt.every_epochs = cfg.train.checkpoint_every_epochs;
  ckpt.keep = cfg.train.keep_checkpoints;
  trainer.add_callback(
      std::make_shared<train::Checkpointing>(run.checkpoints_dir(), run.root() / "model.pt", ckpt, logger));
  if (cfg.train.target_accuracy > 0) {
    trainer.add_callback(std::make_shared<train::EarlyStop>(cfg.train.target_accuracy));
  }
}

// The training itself, in a worker whose run folder and log are ready.
// `elastic`: the generation of an elastic job this run is (Note [Elastic workers]), or null.
int train_in(const TrainArgs& given, const config::RunConfig& cfg, const comm::CommunicatorPtr& communicator,
             io::RunDir& run, const std::shared_ptr<io::Logger>& logger, int restarts, int local_rank,
             Generation* elastic = nullptr) {
  const int rank = communicator ? communicator->rank() : 0;
  if (rank == 0) {
    // A writer killed mid-write (a crash, a kill -9, a restart) leaves its temporary files behind;
    // this run is the folder's only writer, so whatever it finds at its start is stale.
    for (const auto& dir : {run.root(), run.checkpoints_dir()}) {
      for (const auto& removed : io::remove_stale_temporaries(dir))
        logger->info("removed " + removed.string() + ", left by an interrupted write");
    }
  }
  // Rank 0 removed only temporaries, never a checkpoint; it decides for every rank where to start.
  const TrainArgs a = resume_after_restart(given, run, restarts, communicator, logger);
  // What this resume changes, against the configuration the run folder holds until it is rewritten.
  std::vector<ResumeChange> changes;
  if (rank == 0 && !a.resume.empty() && fs::is_regular_file(run.config_path())) {
    changes =
        resume_changes(config::run_config_from_file(run.config_path().string(), {}), cfg, run.config_path());
  }
  if (rank == 0) {
    run.write_config(cfg);
    logger->info(fmt::format("run folder {}", run.root().string()));
  }

  // A resumed run's checkpoint holds its weights: model.init_from is not applied over them again
  // (and its file need not exist any more); model.freeze still applies.
  auto trainer_cfg = cfg;
  if (!a.resume.empty()) trainer_cfg.model.init_from.clear();
  // Reading the data set and the weights to start from: what fails here is an input (Note [Exit codes]).
  std::optional<train::Trainer> built;
  checking_inputs([&] { built.emplace(trainer_cfg, communicator, local_rank); });
  train::Trainer& trainer = *built;
  add_run_callbacks(trainer, cfg, run, logger, rank);
  const auto interrupt = std::make_shared<StopOnInterrupt>(cfg.train.log_every_steps);
  trainer.add_callback(interrupt);
  const bool from_peer = elastic && elastic->start.checkpoint;
  if (elastic) start_generation(*elastic, trainer, *logger);
  if (!a.resume.empty() && !from_peer) {
    const auto checkpoint = checking_inputs([&] { return load_resume_point(a.resume); });
    checking_inputs([&] { trainer.load_state(checkpoint); });
    logger->info(fmt::format("resumed from {} at step {}: {}", a.resume, trainer.step(), describe(changes)));
    if (rank == 0) record_resume(run.root(), a.resume, trainer.step(), changes);
    if (rank == 0) warn_if_repartitioned(checkpoint.metadata(), trainer, a.resume, *logger);
    if (elastic) elastic->resumed_from_step = checkpoint.metadata().value("step", std::int64_t{-1});
  }
  if (elastic && rank == 0) record_generation(run, *elastic, trainer.step());

  const InterruptHandlers handlers;
  train::TrainResult result;
  try {
    result = trainer.fit();
  } catch (const comm::CommError& e) {
    if (!elastic) throw;
    end_generation(*elastic, trainer, e.what(), *logger);
    return kExitSuccess;
  }
  if (elastic && result.stop_reason == kAdmitReason) {
    end_generation(*elastic, trainer, kAdmitReason, *logger);
    return kExitSuccess;
  }
  if (rank == 0) {
    auto j = results_json(cfg, trainer, result, run, communicator ? communicator->backend() : "none");
    if (elastic) j["generations"] = generations_json(run);
    if (interrupt->signal() != 0) j["status"] = "interrupted";
    const auto by_class = per_class_csv(result.final_eval, trainer.datasets().class_names);
    if (!by_class.empty()) {
      io::write_file_atomic(run.root() / "per_class.csv", by_class);
      j["per_class"] = "per_class.csv";
    }
    io::write_json_file(run.results_path(), j);
    std::cout << j.dump() << std::endl;
  }
  if (interrupt->signal() != 0) {
    logger->info(result.stop_reason + "; checkpoint, model.pt and results.json written");
    return 128 + interrupt->signal();  // Note [Exit codes]: a run ended by signal N
  }
  return kExitSuccess;
}

// What is refused before a run folder is made or a worker starts: the device, how many workers
// this host starts and how the data is held for them (graph nodes over ranks), and --resume.
void check_before_start(const TrainArgs& a, const config::RunConfig& cfg, int nproc,
                        const comm::Environment& env) {
  train::check_device_settings(cfg.train);
  if (elastic_options(env)) check_elastic(cfg);
  train::check_cuda_graph(cfg, nproc);
  // The optimizer's and the loss's settings, refused here rather than by the workers after the run
  // folder exists.
  (void)optim::optimizer_factory(cfg.optim);
  (void)optim::create_loss(cfg.optim.loss);
  const bool worker = started_by_a_launcher(env, a);
  if (!worker) {
    launch::check_local_workers(nproc, a.oversubscribe);
    parallel::data_holders(cfg.parallel, nproc);
  }
  if (a.max_restarts > 0 && worker) {
    throw std::invalid_argument(fmt::format(
        "--max-restarts {}: this process is a worker started by a launcher, which does the restarting; "
        "give --max-restarts to the launcher (dtrain launch, torchrun) instead",
        a.max_restarts));
  }
  if (!a.resume.empty() && !worker) (void)load_resume_point(a.resume);
}

// This worker's run folder, ready for `rank` of `world` (`communicator` may be null).
io::RunDir open_run_folder(const TrainArgs& a, const config::RunConfig& cfg,
                           const comm::CommunicatorPtr& communicator, int rank, int world) {
  if (!a.run_dir.empty()) {
    if (rank == 0) fs::create_directories(fs::path(a.run_dir) / "checkpoints");
    if (communicator) communicator->barrier();
    return io::RunDir::open(a.run_dir, rank, world);
  }
  if (const auto resumed = resumed_run_folder(a)) {
    return io::RunDir::open(*resumed, rank, world);  // a resume continues in the run's own folder
  }
  if (communicator && world > 1 && cfg.run_folder == "named") {
    return io::RunDir::create_named_shared(*communicator, cfg.out_dir, cfg.name,
                                           resumes_in(a, fs::path(cfg.out_dir) / cfg.name));
  }
  if (communicator && world > 1) return io::RunDir::create_shared(*communicator, cfg.out_dir, cfg.name);
  return io::RunDir::open(new_run_folder(a, cfg, world).root(), rank, world);
}

// train_in, and a failure reported as every worker reports one.
int train_reporting(const TrainArgs& a, const config::RunConfig& cfg,
                    const comm::CommunicatorPtr& communicator, io::RunDir& run,
                    const std::shared_ptr<io::Logger>& logger, int restarts, int local_rank,
                    Generation* elastic = nullptr) {
  const int rank = communicator ? communicator->rank() : 0;
  const int world = communicator ? communicator->size() : 1;
  try {
    return train_in(a, cfg, communicator, run, logger, restarts, local_rank, elastic);
  } catch (const std::exception& e) {
    // In the rank's log too. Rank 0's logger prints on stderr; the other ranks say it there
    // themselves, for the launcher to quote.
    const auto message = error_message(e);
    logger->error(message);
    if (rank == 0) record_failure(run, message, exit_code_for(e));
    if (rank != 0) std::cerr << fmt::format("[rank {}/{}] dtrain: error: {}\n", rank, world, message);
    return exit_code_for(e);
  }
}

// One worker of an elastic job, generation after generation (Note [Elastic workers]).
int run_elastic_worker(const TrainArgs& a, const config::RunConfig& cfg, const comm::Environment& env,
                       comm::ElasticOptions options) {
  options.timeout = experiment::rendezvous_timeout(cfg);
  const auto base = comm::resolve_rendezvous({}, env);
  const auto secret = base.secret_file.empty()
                          ? std::string()
                          : comm::read_secret_file(base.secret_file, comm::kSecretFileVariable);
  comm::StoreClient store(base.master_addr, base.master_port, options.timeout, secret);
  comm::ElasticMembership membership(store, options, elastic_member_id(env));
  const auto run_key = fmt::format("elastic/{}/run_dir", options.run_id);
  Generation previous;
  for (int generation = 0, rank = -1;;) {
    Generation g;
    g.membership = &membership;
    try {
      g.members = membership.join(generation, rank);
    } catch (const comm::JobFinished& e) {
      std::cerr << "dtrain: " << e.what() << "\n";
      return kExitSuccess;
    }
    g.started = std::chrono::steady_clock::now();
    auto info = base;
    info.rank = g.members.rank;
    info.world_size = g.members.world_size;
    info.store_prefix = g.members.store_prefix;
    info.restart_count = g.members.generation;
    const auto communicator = experiment::connect_worker(cfg, info, nullptr);
    std::optional<io::RunDir> run;
    if (g.members.generation == 0 || !a.run_dir.empty()) {
      run = open_run_folder(a, cfg, communicator, info.rank, info.world_size);
      if (info.rank == 0) store.set_if_absent(run_key, run->root().string());
    } else {
      run = io::RunDir::open(store.get(run_key), info.rank, info.world_size);
    }
    const auto logger = io::Logger::for_rank(run->log_path(), info.rank, info.world_size,
                                             launch::status_relay_requested(env));
    agree_on_previous(g, previous, communicator.get());
    if (communicator) {
      g.start = train::recover_from_peer(*communicator, previous.end_state, previous.end_step);
    } else if (previous.end_state) {  // alone, without a communicator: its own state
      g.start = train::PeerState{std::move(previous.end_state), previous.end_step, 0, 0};
    }
    previous = Generation();
    // Without a state from a peer, a later generation continues from the latest checkpoint, as a
    // restart does (Note [Restarts resume]).
    const int restarts = g.start.checkpoint ? 0 : g.members.generation;
    const int code = train_reporting(a, cfg, communicator, *run, logger, restarts, base.local_rank, &g);
    if (!g.ended) {
      if (code == kExitSuccess && info.rank == 0) membership.mark_finished();
      return code;
    }
    generation = g.members.generation + 1;
    rank = g.members.rank;
    previous = std::move(g);
  }
}

int run_worker(const TrainArgs& a, const config::RunConfig& cfg, const comm::Environment& env) {
  if (const auto elastic = checking_inputs([&] { return elastic_options(env); })) {
    return run_elastic_worker(a, cfg, env, *elastic);
  }
  comm::RendezvousOptions rv;
  if (a.rank >= 0) rv.rank = a.rank;
  if (a.world_size > 0) rv.world_size = a.world_size;
  if (!a.master_addr.empty()) rv.master_addr = a.master_addr;
  if (a.master_port >= 0) rv.master_port = a.master_port;
  rv.dist_url = a.dist_url;
  rv.timeout = experiment::rendezvous_timeout(cfg);
  const auto rendezvous = comm::resolve_rendezvous(rv, env);

  std::string backend_line;  // what parallel.backend: auto chose, and why
  const auto communicator = experiment::connect_worker(cfg, rendezvous, &backend_line);
  auto run = open_run_folder(a, cfg, communicator, rendezvous.rank, rendezvous.world_size);
  auto logger = io::Logger::for_rank(run.log_path(), rendezvous.rank, rendezvous.world_size,
                                     launch::status_relay_requested(env));
  if (!backend_line.empty()) logger->info(backend_line);
  return train_reporting(a, cfg, communicator, run, logger, restart_count(env), rendezvous.local_rank);
}

}  // namespace

Run add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train",
      "Train a model from a YAML config, or without one from the dAD paper's flags (dotted key=value "
      "overrides after either)");
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("config", a->config,
                  "YAML configuration file; without it, the defaults below with the run folder "
                  "logs/<name>/ (the dAD paper's)");
  cmd->add_option(
      "overrides", a->overrides,
      "Overrides such as optim.lr=0.01 parallel.strategy=local; key=null (or ~key) removes a key");
  cmd->add_option("--nproc", a->nproc, "Start this many local workers (default: the config's nproc)")
      ->check(at_least(1));
  cmd->add_flag("--oversubscribe", a->oversubscribe,
                "Start more local workers than 4 per core (at least 16), the bound without it");
  cmd->add_option("--resume", a->resume,
                  "Continue from a run folder's latest checkpoint or a checkpoint file");
  cmd->add_option("--run-dir", a->run_dir, "Write into this run folder instead of a new one");
  cmd->add_option("--max-restarts", a->max_restarts,
                  "Restart the workers up to this many times when one fails; each restart continues from the "
                  "latest checkpoint")
      ->check(at_least(0));
  cmd->add_option("--dist-url", a->dist_url, "Rendezvous as tcp://HOST:PORT (with --rank and --world-size)");
  cmd->add_option("--rank", a->rank, "This worker's rank")->check(at_least(0));
  cmd->add_option("--world-size,--num-nodes", a->world_size, "Number of workers")->check(at_least(1));
  cmd->add_option("--master-addr", a->master_addr, "Rendezvous host");
  cmd->add_option("--master-port", a->master_port, "Rendezvous port")->check(CLI::Range(0, 65535));
  cmd->add_flag("--print-config", a->print_config,
                "Print the effective configuration (CONFIG, flags and overrides applied, defaults filled in) "
                "as a run folder's config.yaml holds it, and exit without training");
  a->dad_flags.add_to(*cmd);
  cmd->footer(config_keys_help() + registered_names_help());
  return [a] {
    take_positionals(*a);
    const auto cfg = checking_inputs([&] { return load_config(*a); });
    if (a->print_config) {
      std::cout << config::to_yaml(cfg) << std::flush;
      return kExitSuccess;
    }
    const auto env = config::process_environment();
    const int nproc = a->nproc > 0 ? a->nproc : cfg.nproc;
    checking_inputs([&] { check_before_start(*a, cfg, nproc, env); });
    if (!started_by_a_launcher(env, *a) && (nproc > 1 || a->max_restarts > 0))
      return launch_workers(*a, cfg, nproc, env);
    return run_worker(*a, cfg, env);
  };
}

int train(const config::RunConfig& config, const TrainOptions& options) {
  try {
    TrainArgs a;
    a.resume = options.resume;
    a.run_dir = options.run_dir;
    // A configuration made in code passes the checks a YAML file's does: through the same reader.
    const auto cfg = checking_inputs(
        [&] { return config::parse_run_config(config::to_yaml(config), "the program's configuration"); });
    const auto env = config::process_environment();
    checking_inputs([&] {
      if (!started_by_a_launcher(env, a) && cfg.nproc > 1) {
        throw std::invalid_argument(fmt::format(
            "nproc {}: a program calling dtrain::cli::train is one worker; start {} of it with dtrain launch "
            "--nproc-per-node {} (or torchrun, mpirun, srun)",
            cfg.nproc, cfg.nproc, cfg.nproc));
      }
      check_before_start(a, cfg, 1, env);
    });
    return run_worker(a, cfg, env);
  } catch (const std::exception& e) {
    std::cerr << "dtrain: error: " + error_message(e) + "\n";
    return exit_code_for(e);
  }
}

}  // namespace dtrain::cli
