// See Run.h: the life of one training run.
#include "dtrain/run/Run.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtrain/comm/Work.h"
#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/comm/store/StoreSecret.h"
#include "dtrain/config/Environment.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/JsonFile.h"
#include "dtrain/io/TensorBoardWriter.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/optim/Optimizers.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/run/ElasticWorker.h"
#include "dtrain/run/ExitCodes.h"
#include "dtrain/run/Interrupt.h"
#include "dtrain/run/ResumeConfig.h"
#include "dtrain/run/RunFolder.h"
#include "dtrain/run/RunResults.h"
#include "dtrain/run/SelfExe.h"
#include "dtrain/run/WorkerLaunch.h"
#include "dtrain/train/EarlyStop.h"
#include "dtrain/train/RunCallbacks.h"
#include "dtrain/train/Trainer.h"

namespace dtrain::run {
namespace {

namespace fs = std::filesystem;

// One worker of a job: its rendezvous is on the command line, or a launcher started it.
bool started_by_a_launcher(const comm::Environment& env, const JobOptions& job) {
  if (job.rank >= 0 || !job.dist_url.empty()) return true;
  return comm::launcher_of(env) != comm::RendezvousSource::Default;
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

// Starts `nproc` local workers running this same command, each told the run folder.
int launch_workers(const JobOptions& a, const config::RunConfig& cfg, int nproc,
                   const comm::Environment& env) {
  fs::path root;
  if (!a.run_dir.empty()) {
    root = a.run_dir;
  } else if (const auto resumed = resumed_run_folder(a.resume)) {
    root = *resumed;
  } else if (!a.resume.empty()) {
    root = run_folder_of(a.resume);
  } else {
    root = new_run_folder(a, cfg, nproc).root();
  }
  auto options = worker_launch(cfg, nproc, root, env);
  options.max_restarts = a.max_restarts;
  options.oversubscribe = a.oversubscribe;
  // The workers read the configuration as this process did, from the same file and overrides.
  options.command = train_command(self_executable(), a.config_file, a.overrides, root, a.resume);
  // The launcher has reported a failure itself.
  return launch::launch(options).exit_code;
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

// Rank 0's effective configuration in the run folder (Note [What a run records] in run/Run.h).
void write_config(io::RunDir& run, const config::RunConfig& cfg, io::Logger& logger) {
  run.write_config(cfg);
  logger.info(fmt::format("run folder {}", run.root().string()));
}

// Rank 0's results.json (and per_class.csv), also printed as the run's last line on stdout.
void write_results(const config::RunConfig& cfg, const train::Trainer& trainer,
                   const train::TrainResult& result, const io::RunDir& run, bool elastic, bool interrupted) {
  const auto& communicator = trainer.communicator();
  auto j = results_json(cfg, trainer, result, run, communicator ? communicator->backend() : "none");
  if (elastic) j["generations"] = generations_json(run);
  if (interrupted) j["status"] = "interrupted";
  const auto by_class = per_class_csv(result.final_eval, trainer.datasets().class_names);
  if (!by_class.empty()) {
    io::write_file_atomic(run.root() / "per_class.csv", by_class);
    j["per_class"] = "per_class.csv";
  }
  io::write_json_file(run.results_path(), j);
  std::cout << j.dump() << std::endl;
}

// The training itself, in a worker whose run folder and log are ready.
// `elastic`: the generation of an elastic job this run is (Note [Elastic workers]), or null.
int train_in(const TrainOptions& given, const config::RunConfig& cfg,
             const comm::CommunicatorPtr& communicator, io::RunDir& run,
             const std::shared_ptr<io::Logger>& logger, int restarts, int local_rank, int local_world_size,
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
  const TrainOptions a = resume_after_restart(given, run, restarts, communicator, logger);
  // What this resume changes, against the configuration the run folder holds until it is rewritten.
  std::vector<ResumeChange> changes;
  if (rank == 0 && !a.resume.empty() && fs::is_regular_file(run.config_path())) {
    changes =
        resume_changes(config::run_config_from_file(run.config_path().string(), {}), cfg, run.config_path());
  }
  // A resume's checkpoint is loaded before the run folder's config.yaml is rewritten: a resume
  // refused for it (another optimizer, a position past this run's epochs, train.max_steps below its
  // step) leaves the folder as it was.
  const bool from_peer = elastic && elastic->start.checkpoint;
  const bool resuming = !a.resume.empty() && !from_peer;
  if (rank == 0 && !resuming) write_config(run, cfg, *logger);

  // A resumed run's checkpoint holds its weights: model.init_from is not applied over them again
  // (and its file need not exist any more); model.freeze still applies.
  auto trainer_cfg = cfg;
  if (!a.resume.empty()) trainer_cfg.model.init_from.clear();
  // Reading the data set and the weights to start from: what fails here is an input (Note [Exit codes]).
  std::optional<train::Trainer> built;
  checking_inputs([&] { built.emplace(trainer_cfg, communicator, local_rank, local_world_size); });
  train::Trainer& trainer = *built;
  std::optional<nlohmann::json> resumed;  // the checkpoint's metadata
  if (resuming) {
    const auto checkpoint = checking_inputs([&] { return load_resume_point(a.resume); });
    checking_inputs([&] { trainer.load_state(checkpoint); });
    resumed = checkpoint.metadata();
    if (rank == 0) write_config(run, cfg, *logger);
  }
  add_run_callbacks(trainer, cfg, run, logger, rank);
  const auto interrupt = std::make_shared<StopOnInterrupt>(cfg.train.log_every_steps);
  trainer.add_callback(interrupt);
  if (elastic) start_generation(*elastic, trainer, *logger);
  if (resumed) {
    logger->info(fmt::format("resumed from {} at step {}: {}", a.resume, trainer.step(), describe(changes)));
    if (rank == 0) record_resume(run.root(), a.resume, trainer.step(), changes);
    if (rank == 0) warn_if_repartitioned(*resumed, trainer, a.resume, *logger);
    if (elastic) elastic->resumed_from_step = resumed->value("step", std::int64_t{-1});
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
  if (rank == 0) write_results(cfg, trainer, result, run, elastic != nullptr, interrupt->signal() != 0);
  if (interrupt->signal() != 0) {
    logger->info(result.stop_reason + "; checkpoint, model.pt and results.json written");
    return 128 + interrupt->signal();  // Note [Exit codes]: a run ended by signal N
  }
  return kExitSuccess;
}

// The settings refused before a run folder is made or a worker starts, for `world` workers: the
// device, a CUDA graph's conditions, the optimizer's and the loss's settings.
void check_settings(const config::RunConfig& cfg, int world) {
  train::check_device_settings(cfg.train);
  train::check_cuda_graph(cfg, world);
  (void)optim::optimizer_factory(cfg.optim);
  (void)optim::create_loss(cfg.optim.loss);
}

// What is refused before a run folder is made or a worker starts: the settings, how many workers
// this host starts and how the data is held for them (graph nodes over ranks), and --resume.
void check_before_start(const JobOptions& a, const config::RunConfig& cfg, int nproc,
                        const comm::Environment& env) {
  if (elastic_options(env)) check_elastic(cfg);
  check_settings(cfg, nproc);
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

// train_in, and a failure reported as every worker reports one.
int train_reporting(const TrainOptions& a, const config::RunConfig& cfg,
                    const comm::CommunicatorPtr& communicator, io::RunDir& run,
                    const std::shared_ptr<io::Logger>& logger, int restarts, int local_rank,
                    int local_world_size, Generation* elastic = nullptr) {
  const int rank = communicator ? communicator->rank() : 0;
  const int world = communicator ? communicator->size() : 1;
  try {
    return train_in(a, cfg, communicator, run, logger, restarts, local_rank, local_world_size, elastic);
  } catch (const std::exception& e) {
    // In the rank's log too. Rank 0's logger prints on stderr; the other ranks say it there
    // themselves, for the launcher to quote.
    const auto message = error_message(e);
    logger->error(message);
    // A resume refused for what it was given leaves the run's results.json as the run left it.
    const bool refused_resume = !a.resume.empty() && exit_code_for(e) == kExitUsage;
    if (rank == 0 && !refused_resume) record_failure(run, message, exit_code_for(e));
    if (rank != 0) std::cerr << fmt::format("[rank {}/{}] dtrain: error: {}\n", rank, world, message);
    return exit_code_for(e);
  }
}

// One worker of an elastic job, generation after generation (Note [Elastic workers]).
int run_elastic_worker(const TrainOptions& a, const config::RunConfig& cfg, const comm::Environment& env,
                       comm::ElasticOptions options) {
  options.timeout = rendezvous_timeout(cfg);
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
      // A member of the generation before reads only what changed (Note [Membership rounds]).
      g.members = rank >= 0 ? membership.join(previous.members) : membership.join(generation, rank);
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
    const auto communicator = connect_worker(cfg, info, nullptr);
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
    const int code = train_reporting(a, cfg, communicator, *run, logger, restarts, base.local_rank,
                                     base.local_world_size, &g);
    if (!g.ended) {
      if (code == kExitSuccess && info.rank == 0) membership.mark_finished();
      return code;
    }
    generation = g.members.generation + 1;
    rank = g.members.rank;
    previous = std::move(g);
  }
}

int run_worker(const JobOptions& a, const config::RunConfig& cfg, const comm::Environment& env) {
  if (const auto elastic = checking_inputs([&] { return elastic_options(env); })) {
    return run_elastic_worker(a, cfg, env, *elastic);
  }
  comm::RendezvousOptions rv;
  if (a.rank >= 0) rv.rank = a.rank;
  if (a.world_size > 0) rv.world_size = a.world_size;
  if (!a.master_addr.empty()) rv.master_addr = a.master_addr;
  if (a.master_port >= 0) rv.master_port = a.master_port;
  rv.dist_url = a.dist_url;
  rv.timeout = rendezvous_timeout(cfg);
  const auto rendezvous = comm::resolve_rendezvous(rv, env);

  std::string backend_line;  // what parallel.backend: auto chose, and why
  const auto communicator = connect_worker(cfg, rendezvous, &backend_line);
  auto run = open_run_folder(a, cfg, communicator, rendezvous.rank, rendezvous.world_size);
  auto logger = io::Logger::for_rank(run.log_path(), rendezvous.rank, rendezvous.world_size,
                                     launch::status_relay_requested(env));
  if (!backend_line.empty()) logger->info(backend_line);
  return train_reporting(a, cfg, communicator, run, logger, restart_count(env), rendezvous.local_rank,
                         rendezvous.local_world_size);
}

// One rank of a job whose communicator the program made: no rendezvous, and not a worker of an
// elastic job, whose generations connect anew; a launcher's restart still resumes from the latest
// checkpoint (Note [Restarts resume]). Its GPU under
// train.device: cuda is the launcher's LOCAL_RANK where one started the process, else its rank.
int train_with(const TrainOptions& options, const config::RunConfig& cfg, comm::CommunicatorPtr communicator,
               const comm::Environment& env) {
  const int rank = communicator->rank();
  const int world = communicator->size();
  // The launcher's local rank and world size where one started the process, else none said.
  const auto [local_rank, local_world_size] = checking_inputs([&] {
    if (elastic_options(env)) {
      throw std::invalid_argument(
          "a program passing its own communicator to train() cannot be a worker of an elastic job "
          "(dtrain launch --nnodes MIN:MAX), which connects anew for every generation; call train() without "
          "one");
    }
    check_settings(cfg, world);
    parallel::data_holders(cfg.parallel, world);
    if (!options.resume.empty()) (void)load_resume_point(options.resume);
    if (comm::launcher_of(env) == comm::RendezvousSource::Default) return std::pair<int, int>{rank, 0};
    const auto rendezvous = comm::resolve_rendezvous({}, env);
    return std::pair<int, int>{rendezvous.local_rank, rendezvous.local_world_size};
  });
  auto run = open_run_folder(options, cfg, communicator, rank, world);
  const auto logger = io::Logger::for_rank(run.log_path(), rank, world, false);
  return train_reporting(options, cfg, communicator, run, logger, restart_count(env), local_rank,
                         local_world_size);
}

}  // namespace

int run_job(const config::RunConfig& cfg, const JobOptions& job) {
  const auto env = config::process_environment();
  const int nproc = job.nproc > 0 ? job.nproc : cfg.nproc;
  checking_inputs([&] { check_before_start(job, cfg, nproc, env); });
  if (!started_by_a_launcher(env, job) && (nproc > 1 || job.max_restarts > 0))
    return launch_workers(job, cfg, nproc, env);
  return run_worker(job, cfg, env);
}

int train(const config::RunConfig& config, const TrainOptions& options, comm::CommunicatorPtr communicator) {
  try {
    JobOptions job;
    static_cast<TrainOptions&>(job) = options;
    // A configuration made in code passes the checks a YAML file's does: through the same reader.
    const auto cfg = checking_inputs([&] {
      config::check_model_keys_read(config, "the program's configuration");
      return config::parse_run_config(config::to_yaml(config), "the program's configuration");
    });
    const auto env = config::process_environment();
    if (communicator) return train_with(job, cfg, std::move(communicator), env);
    checking_inputs([&] {
      if (!started_by_a_launcher(env, job) && cfg.nproc > 1) {
        throw std::invalid_argument(fmt::format(
            "nproc {}: a program calling dtrain's train() is one worker; start {} of it with dtrain launch "
            "--nproc-per-node {} (or torchrun, mpirun, srun)",
            cfg.nproc, cfg.nproc, cfg.nproc));
      }
      check_before_start(job, cfg, 1, env);
    });
    return run_worker(job, cfg, env);
  } catch (const std::exception& e) {
    std::cerr << "dtrain: error: " + error_message(e) + "\n";
    return exit_code_for(e);
  }
}

}  // namespace dtrain::run
