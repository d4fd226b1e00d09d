// Creating the run folder once, on rank 0, and agreeing on its path across ranks.
#include "dtrain/io/RunDir.h"

#include <torch/types.h>

#include <cstring>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/AtomicFile.h"

namespace dtrain::io {
namespace {

void make_folders(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) {
    throw std::runtime_error("cannot create the folder " + path.string() + ": " + error.message() +
                             "; set out_dir to a writable location");
  }
}

void check_name(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    throw std::invalid_argument("run name: expected a non-empty name without '/', not . or .., found \"" +
                                name + "\"");
  }
}

bool holds_something(const std::filesystem::path& dir) {
  std::error_code error;
  return std::filesystem::is_directory(dir, error) && !std::filesystem::is_empty(dir, error);
}

std::string rank_prefix(int rank, int world_size) {
  return "[rank " + std::to_string(rank) + "/" + std::to_string(world_size) + "] ";
}

// Rank 0's outcome on every rank: whether it succeeded, and its text (a path, or why it failed).
// Rank 0 sends [status, length], then the bytes of the text.
std::pair<bool, std::string> from_rank0(comm::Communicator& comm, bool ok, std::string text) {
  auto header =
      torch::tensor({static_cast<std::int64_t>(ok), static_cast<std::int64_t>(text.size())}, torch::kInt64);
  comm.broadcast(header, 0);
  const auto length = header[1].item<std::int64_t>();
  auto bytes = torch::zeros({length}, torch::kUInt8);
  if (comm.rank() == 0) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  if (length > 0) comm.broadcast(bytes, 0);
  text.assign(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(length));
  return {header[0].item<std::int64_t>() != 0, text};
}

[[noreturn]] void throw_rank0_failure(const comm::Communicator& comm, const std::string& reason) {
  if (comm.rank() == 0) throw std::runtime_error(reason);
  throw std::runtime_error(rank_prefix(comm.rank(), comm.size()) +
                           "rank 0 could not create the run folder: " + reason);
}

}  // namespace

std::string run_folder_name(std::chrono::system_clock::time_point start, const std::string& name) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(start);
  std::tm local{};
  localtime_r(&seconds, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  return std::string(stamp) + "_" + name;
}

RunDir::RunDir(std::filesystem::path root, int rank, int world_size)
    : root_(std::move(root)), rank_(rank), world_size_(world_size) {
  make_folders(site_dir());
}

RunDir RunDir::create(const std::filesystem::path& out_dir, const std::string& name, int world_size,
                      std::chrono::system_clock::time_point start) {
  check_name(name);
  make_folders(out_dir);
  const std::string base = run_folder_name(start, name);
  for (int attempt = 1;; ++attempt) {
    const auto root = out_dir / (attempt == 1 ? base : base + "-" + std::to_string(attempt));
    std::error_code error;
    // create_directory reports false for an existing folder: the check and the creation are one step,
    // so two runs started in the same second never share a folder.
    if (std::filesystem::create_directory(root, error)) {
      make_folders(root / "checkpoints");
      return RunDir(root, 0, world_size);
    }
    if (error) {
      throw std::runtime_error("cannot create the run folder " + root.string() + ": " + error.message() +
                               "; set out_dir to a writable location");
    }
  }
}

RunDir RunDir::open(const std::filesystem::path& root, int rank, int world_size) {
  if (!std::filesystem::is_directory(root)) {
    throw std::runtime_error("[rank " + std::to_string(rank) + "/" + std::to_string(world_size) +
                             "] run folder " + root.string() +
                             " does not exist; rank 0 creates it, and every rank must see the same file "
                             "system (set out_dir to a shared folder)");
  }
  return RunDir(root, rank, world_size);
}

RunDir RunDir::create_shared(comm::Communicator& comm, const std::filesystem::path& out_dir,
                             const std::string& name, std::chrono::system_clock::time_point start) {
  std::string text;
  bool ok = true;
  std::optional<RunDir> created;
  if (comm.rank() == 0) {
    try {
      created.emplace(create(out_dir, name, comm.size(), start));
      text = created->root().string();
    } catch (const std::exception& e) {
      ok = false;
      text = e.what();
    }
  }
  const auto [shared_ok, shared_text] = from_rank0(comm, ok, text);
  if (!shared_ok) throw_rank0_failure(comm, shared_text);
  if (created) return std::move(*created);
  return open(shared_text, comm.rank(), comm.size());
}

RunDir RunDir::create_named(const std::filesystem::path& out_dir, const std::string& name, int world_size,
                            bool continuing) {
  check_name(name);
  make_folders(out_dir);
  const auto root = out_dir / name;
  std::error_code error;
  const bool created = std::filesystem::create_directory(root, error);
  if (error) {
    throw std::runtime_error("cannot create the run folder " + root.string() + ": " + error.message() +
                             "; set out_dir (--log-dir) to a writable location");
  }
  if (!created && !continuing && holds_something(root)) {
    // Only a run that saved a checkpoint can be continued (one that failed at the start cannot).
    const bool resumable = std::filesystem::exists(root / "checkpoints" / "latest");
    throw std::runtime_error("run folder " + root.string() +
                             " holds an earlier run, and a new run would mix with it; choose another name "
                             "(--name) or remove the folder" +
                             (resumable ? ", or continue that run with --resume " + root.string()
                                        : " (that run saved no checkpoint to continue from)"));
  }
  make_folders(root / "checkpoints");
  return RunDir(root, 0, world_size);
}

RunDir RunDir::create_named_shared(comm::Communicator& comm, const std::filesystem::path& out_dir,
                                   const std::string& name, bool continuing) {
  const int rank = comm.rank(), world = comm.size();
  std::string text;
  bool ok = true;
  std::optional<RunDir> made;
  if (rank == 0) {
    try {
      made.emplace(create_named(out_dir, name, world, continuing));
      text = made->root().string();
    } catch (const std::exception& e) {
      ok = false;
      text = e.what();
    }
  }
  const auto [shared_ok, root] = from_rank0(comm, ok, text);
  if (!shared_ok) throw_rank0_failure(comm, root);

  // Each other rank's own site folder, and agreement: a rank that refuses must not leave the
  // others waiting in their first collective.
  std::string refusal;
  if (rank != 0) {
    const std::filesystem::path site = std::filesystem::path(root) / ("site_" + std::to_string(rank));
    try {
      if (!continuing && holds_something(site)) {
        throw std::runtime_error(rank_prefix(rank, world) + "run folder " + site.string() +
                                 " holds an earlier run's site_" + std::to_string(rank) +
                                 ", and a new run would mix with it; choose another name (--name), remove "
                                 "the folder, or continue that run with --resume " +
                                 root);
      }
      made.emplace(RunDir(root, rank, world));
    } catch (const std::exception& e) {
      refusal = e.what();
    }
  }
  auto refused = torch::zeros({world}, torch::kInt64);
  refused[rank] = refusal.empty() ? 0 : 1;
  comm.allreduce(refused);
  if (!refusal.empty()) throw std::runtime_error(refusal);
  if (refused.sum().item<std::int64_t>() > 0) {
    const auto first = refused.nonzero()[0][0].item<std::int64_t>();
    throw std::runtime_error(rank_prefix(rank, world) + "rank " + std::to_string(first) +
                             " refused its run folder (see its error); run folder " + root);
  }
  return std::move(*made);
}

void RunDir::write_config(const config::RunConfig& config) const {
  write_file_atomic(config_path(), config::to_yaml(config));
}

}  // namespace dtrain::io
