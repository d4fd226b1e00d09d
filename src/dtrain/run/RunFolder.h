// Where a run writes: a new run folder, the folder a --resume continues, or the --run-dir a
// launcher names; and where a resume or a restart starts from (its latest checkpoint).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "dtrain/comm/Communicator.h"
#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/Logger.h"
#include "dtrain/io/RunDir.h"
#include "dtrain/run/Run.h"

namespace dtrain::run {

// The run folder `resume` continues, where it is one (it has the config.yaml every run writes): the
// folder itself, its checkpoints/ folder, or one checkpoint in it.
std::optional<std::filesystem::path> resumed_run_folder(const std::string& resume);

// The run folder that `resume` points into, whether or not it holds a config.yaml.
std::filesystem::path run_folder_of(const std::filesystem::path& resume);

// A new run folder for rank 0 of `world` ranks, in the layout the config names.
io::RunDir new_run_folder(const TrainOptions& options, const config::RunConfig& cfg, int world);

// This worker's run folder, ready for `rank` of `world` (`communicator` may be null).
io::RunDir open_run_folder(const TrainOptions& options, const config::RunConfig& cfg,
                           const comm::CommunicatorPtr& communicator, int rank, int world);

// A run folder or its checkpoints/ folder -> the latest checkpoint; a file -> itself.
io::Checkpoint load_resume_point(const std::filesystem::path& where);

// The attempt of the job that this worker belongs to: 0, or the restarts before it
// (TORCHELASTIC_RESTART_COUNT, which dtrain launch and torchrun set, also through mpirun).
int restart_count(const comm::Environment& env);

// `options` for attempt `restarts` of the job: a restarted attempt resumes from the run folder's
// latest checkpoint where there is one (Note [Restarts resume]).
TrainOptions resume_after_restart(const TrainOptions& options, const io::RunDir& run, int restarts,
                                  const comm::CommunicatorPtr& communicator,
                                  const std::shared_ptr<io::Logger>& logger);

}  // namespace dtrain::run
