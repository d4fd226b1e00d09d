// Starting the workers of one run of a configuration, both sides of it: the launcher's options on
// the host that starts them, and the communicator each worker connects. `dtrain train --nproc`,
// every run of `dtrain experiment` and every point of `dtrain bench throughput` start theirs here,
// so the three start workers alike for the same configuration.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/launch/Launcher.h"

namespace dtrain::run {

// parallel.timeout_s: the rendezvous and every collective.
std::chrono::milliseconds rendezvous_timeout(const config::RunConfig& cfg);

// The launcher's options for `nproc` local workers of a run of `cfg`, their logs in
// <run_dir>/launch: how they start (launch::start_method_for, for parallel.backend and where the
// strategy's collectives run), their intra-op threads (train.threads), the rendezvous timeout and
// `environment` for them to inherit. The caller adds the command and, where it has them, restarts,
// oversubscription and where the output goes.
launch::LaunchOptions worker_launch(const config::RunConfig& cfg, int nproc,
                                    const std::filesystem::path& run_dir,
                                    const comm::Environment& environment);

// `<executable> train [config] <overrides...> --run-dir <run_dir> [--resume <resume>]`: every worker
// reads the configuration as the starting process did and writes into the one run folder.
std::vector<std::string> train_command(const std::string& executable, const std::string& config,
                                       const std::vector<std::string>& overrides,
                                       const std::filesystem::path& run_dir, const std::string& resume = "");

// In a worker that joined `rendezvous`: its communicator for a run of `cfg` (the backend of
// parallel.backend, see Note [Choosing a backend], with parallel's timeout, poll wait, gloo threads
// and debug mode), or none for a single rank whose strategy needs none. `backend_line` receives
// what parallel.backend: auto chose and why.
comm::CommunicatorPtr connect_worker(const config::RunConfig& cfg, const comm::RendezvousInfo& rendezvous,
                                     std::string* backend_line = nullptr);

}  // namespace dtrain::run
