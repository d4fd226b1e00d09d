// The launcher's options and the worker's communicator for a run of a configuration.
#include "dtrain/run/WorkerLaunch.h"

#include "dtrain/comm/Backend.h"
#include "dtrain/parallel/Registry.h"

namespace dtrain::run {

std::chrono::milliseconds rendezvous_timeout(const config::RunConfig& cfg) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(cfg.parallel.timeout_s * 1000));
}

launch::LaunchOptions worker_launch(const config::RunConfig& cfg, int nproc,
                                    const std::filesystem::path& run_dir,
                                    const comm::Environment& environment) {
  launch::LaunchOptions options;
  options.nproc_per_node = nproc;
  // The launcher and comm/ name backends by text, comm's own names, which parallel.backend's are.
  options.backend =
      launch::start_method_for(config::kBackendNames.name(cfg.parallel.backend), nproc,
                               parallel::collectives_on_gpu(cfg.train.device, cfg.parallel), environment);
  options.threads = cfg.train.threads;
  options.log_dir = (run_dir / "launch").string();
  options.rendezvous_timeout = rendezvous_timeout(cfg);
  options.environment = environment;
  return options;
}

std::vector<std::string> train_command(const std::string& executable, const std::string& config,
                                       const std::vector<std::string>& overrides,
                                       const std::filesystem::path& run_dir, const std::string& resume) {
  std::vector<std::string> command{executable, "train"};
  if (!config.empty()) command.push_back(config);
  command.insert(command.end(), overrides.begin(), overrides.end());
  command.insert(command.end(), {"--run-dir", run_dir.string()});
  if (!resume.empty()) command.insert(command.end(), {"--resume", resume});
  return command;
}

comm::CommunicatorPtr connect_worker(const config::RunConfig& cfg, const comm::RendezvousInfo& rendezvous,
                                     std::string* backend_line) {
  if (rendezvous.world_size <= 1 && !parallel::find_strategy(cfg.parallel.strategy).needs_communicator) {
    return nullptr;
  }
  comm::BackendOptions backend;
  // See Note [Choosing a backend].
  backend.name =
      comm::resolve_backend(config::kBackendNames.name(cfg.parallel.backend), rendezvous,
                            parallel::collectives_on_gpu(cfg.train.device, cfg.parallel), backend_line);
  backend.timeout = rendezvous_timeout(cfg);
  backend.poll_wait = std::chrono::microseconds(cfg.parallel.poll_wait_us);
  backend.gloo_threads = cfg.parallel.gloo_threads;
  backend.debug =
      cfg.parallel.debug == config::DebugMode::Detail ? comm::DebugMode::Detail : comm::DebugMode::Off;
  return comm::connect(backend, rendezvous);
}

}  // namespace dtrain::run
