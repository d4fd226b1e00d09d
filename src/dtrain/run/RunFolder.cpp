// See RunFolder.h.
#include "dtrain/run/RunFolder.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

#include "dtrain/run/ResumeConfig.h"

namespace dtrain::run {
namespace {

namespace fs = std::filesystem;

// Whether `resume` continues the run in `folder` (so a named run folder may exist already).
bool resumes_in(const std::string& resume, const fs::path& folder) {
  if (resume.empty() || !fs::exists(folder)) return false;
  std::error_code error;
  return fs::equivalent(run_folder_of(resume), folder, error);
}

}  // namespace

std::optional<fs::path> resumed_run_folder(const std::string& resume) {
  if (resume.empty()) return std::nullopt;
  const auto folder = run_folder_of(resume);
  if (!fs::is_regular_file(saved_config_path(folder))) return std::nullopt;
  return folder;
}

fs::path run_folder_of(const fs::path& resume) {
  if (fs::is_directory(resume / "checkpoints")) return resume;
  const auto checkpoints = fs::is_regular_file(resume) ? resume.parent_path() : resume;
  return checkpoints.parent_path();
}

io::RunDir new_run_folder(const TrainOptions& options, const config::RunConfig& cfg, int world) {
  if (cfg.run_folder == config::RunFolder::Named) {
    return io::RunDir::create_named(cfg.out_dir, cfg.name, world,
                                    resumes_in(options.resume, fs::path(cfg.out_dir) / cfg.name));
  }
  return io::RunDir::create(cfg.out_dir, cfg.name, world);
}

io::RunDir open_run_folder(const TrainOptions& options, const config::RunConfig& cfg,
                           const comm::CommunicatorPtr& communicator, int rank, int world) {
  if (!options.run_dir.empty()) {
    if (rank == 0) fs::create_directories(fs::path(options.run_dir) / "checkpoints");
    if (communicator) communicator->barrier();
    return io::RunDir::open(options.run_dir, rank, world);
  }
  if (const auto resumed = resumed_run_folder(options.resume)) {
    return io::RunDir::open(*resumed, rank, world);  // a resume continues in the run's own folder
  }
  if (communicator && world > 1 && cfg.run_folder == config::RunFolder::Named) {
    return io::RunDir::create_named_shared(*communicator, cfg.out_dir, cfg.name,
                                           resumes_in(options.resume, fs::path(cfg.out_dir) / cfg.name));
  }
  if (communicator && world > 1) return io::RunDir::create_shared(*communicator, cfg.out_dir, cfg.name);
  return io::RunDir::open(new_run_folder(options, cfg, world).root(), rank, world);
}

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
TrainOptions resume_after_restart(const TrainOptions& options, const io::RunDir& run, int restarts,
                                  const comm::CommunicatorPtr& communicator,
                                  const std::shared_ptr<io::Logger>& logger) {
  if (restarts == 0) return options;
  TrainOptions resumed = options;
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
                             options.resume.empty() ? "from step 0" : "from --resume " + options.resume));
  }
  return resumed;
}

}  // namespace dtrain::run
