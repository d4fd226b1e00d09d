// The run folder: runs/<YYYYmmdd-HHMMSS>_<name>/ (or Catalyst dAD's logs/<name>/) with config.yaml,
// results.json, metrics.jsonl, TensorBoard events, checkpoints/ and one site_<rank>/ per rank
// (docs/ARCHITECTURE.md, "one checkpoint"). Rank 0 alone creates the folder; the other ranks learn its path
// from rank 0 (create_shared broadcasts it).
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfig.h"

namespace dtrain::io {

// "<YYYYmmdd-HHMMSS>_<name>" for `start` in local time.
std::string run_folder_name(std::chrono::system_clock::time_point start, const std::string& name);

class RunDir {
 public:
  // Creates <out_dir>/<YYYYmmdd-HHMMSS>_<name>/ (with "-2", "-3", ... appended when a run of the
  // same name started in the same second) and its checkpoints/ folder, for rank 0. Throws
  // std::runtime_error when out_dir cannot be created.
  static RunDir create(const std::filesystem::path& out_dir, const std::string& name, int world_size = 1,
                       std::chrono::system_clock::time_point start = std::chrono::system_clock::now());

  // The folder rank 0 created, seen from `rank`; creates site_<rank>/. Throws when root is missing.
  static RunDir open(const std::filesystem::path& root, int rank, int world_size);

  // Collective: rank 0 creates the folder and broadcasts its path; every rank returns its view.
  // When rank 0 fails, every rank throws with rank 0's reason.
  static RunDir create_shared(comm::Communicator& comm, const std::filesystem::path& out_dir,
                              const std::string& name,
                              std::chrono::system_clock::time_point start = std::chrono::system_clock::now());

  // Catalyst dAD's layout, run_folder: named: <out_dir>/<name>/ itself, for rank 0. A folder that an
  // earlier run left (one that is not empty) is refused, so two runs never mix their logs, metrics
  // and checkpoints, unless `continuing`: a resumed run writes on in its own folder.
  static RunDir create_named(const std::filesystem::path& out_dir, const std::string& name, int world_size,
                             bool continuing);

  // Collective create_named: rank 0 creates the folder and broadcasts the outcome; then every other
  // rank makes its own site_<rank>/, with the folder itself where it is missing (Catalyst dAD's sites
  // are machines of their own, each keeping logs/<name>/site_<rank>/), and refuses a site folder
  // that an earlier run left unless `continuing`. When any rank refuses, every rank throws.
  static RunDir create_named_shared(comm::Communicator& comm, const std::filesystem::path& out_dir,
                                    const std::string& name, bool continuing);

  const std::filesystem::path& root() const { return root_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  std::filesystem::path site_dir() const { return root_ / ("site_" + std::to_string(rank_)); }
  std::filesystem::path log_path() const { return site_dir() / "log.txt"; }
  std::filesystem::path checkpoints_dir() const { return root_ / "checkpoints"; }
  std::filesystem::path config_path() const { return root_ / "config.yaml"; }
  std::filesystem::path results_path() const { return root_ / "results.json"; }
  std::filesystem::path metrics_jsonl_path() const { return root_ / "metrics.jsonl"; }
  std::filesystem::path metrics_csv_path() const { return root_ / "metrics.csv"; }
  // TensorBoard reads every events.out.tfevents.* file in the folder it is pointed at.
  std::filesystem::path tensorboard_dir() const { return root_; }

  // Writes the effective configuration to config.yaml (atomically); loading it gives `config` back.
  void write_config(const config::RunConfig& config) const;

 private:
  RunDir(std::filesystem::path root, int rank, int world_size);

  std::filesystem::path root_;
  int rank_;
  int world_size_;
};

}  // namespace dtrain::io
