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
  if (name.empty() || name.find('/') != std::string::npos) {
    throw std::invalid_argument("run name: expected a non-empty name without '/', found \"" + name + "\"");
  }
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
  // Rank 0 sends [status, length] then the bytes of the path, or of its error message.
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
  auto header =
      torch::tensor({static_cast<std::int64_t>(ok), static_cast<std::int64_t>(text.size())}, torch::kInt64);
  comm.broadcast(header, 0);
  const auto length = header[1].item<std::int64_t>();
  auto bytes = torch::zeros({length}, torch::kUInt8);
  if (comm.rank() == 0) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  if (length > 0) comm.broadcast(bytes, 0);
  text.assign(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(length));
  if (header[0].item<std::int64_t>() == 0) {
    if (comm.rank() == 0) throw std::runtime_error(text);
    throw std::runtime_error("[rank " + std::to_string(comm.rank()) + "/" + std::to_string(comm.size()) +
                             "] rank 0 could not create the run folder: " + text);
  }
  if (created) return std::move(*created);
  return open(text, comm.rank(), comm.size());
}

void RunDir::write_config(const config::RunConfig& config) const {
  write_file_atomic(config_path(), config::to_yaml(config));
}

}  // namespace dtrain::io
