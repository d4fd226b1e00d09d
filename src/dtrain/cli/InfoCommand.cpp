// `dtrain info`: what this build and this machine offer — versions, backends, cores, threads, BLAS.
// Users paste it into bug reports; benchmarks record it beside their figures.
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/version.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "dtrain/cli/Commands.h"
#include "dtrain/comm/Backend.h"

namespace dtrain::cli {
namespace {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

// The BLAS actually mapped into this process: LibTorch links the generic libblas.so.3, which
// Debian's alternatives point at OpenBLAS, BLIS or the reference implementation.
std::string blas_in_use() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> libs;
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("blas") != std::string::npos || path.find("blis") != std::string::npos ||
        path.find("mkl") != std::string::npos) {
      libs.insert(path);
    }
  }
  if (libs.empty()) return "none loaded";
  std::string joined;
  for (const auto& lib : libs) {
    std::string kind = "reference";
    if (lib.find("openblas") != std::string::npos) kind = "OpenBLAS";
    if (lib.find("blis") != std::string::npos) kind = "BLIS";
    if (lib.find("mkl") != std::string::npos) kind = "MKL";
    joined += (joined.empty() ? "" : ", ") + kind + " (" + lib + ")";
  }
  return joined;
}

nlohmann::json collect_info() {
  // Touch BLAS once so the library is mapped before /proc/self/maps is read.
  (void)torch::mm(torch::ones({2, 2}), torch::ones({2, 2}));
  nlohmann::json info;
  info["dtrain"] = DTRAIN_VERSION;
  info["libtorch"] = TORCH_VERSION;
  info["backends"] = comm::available_backends();
  info["cuda"] = torch::cuda::is_available();
  info["cores"] = usable_cores();
  info["intra_op_threads"] = at::get_num_threads();
  info["inter_op_threads"] = at::get_num_interop_threads();
  info["blas"] = blas_in_use();
  return info;
}

}  // namespace

Run add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show versions, backends, cores, threads and BLAS");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print one JSON object instead of a table");
  return [json] {
    const auto info = collect_info();
    if (*json) {
      std::cout << info.dump() << "\n";
      return kExitSuccess;
    }
    std::cout << fmt::format("dtrain            {}\n", info["dtrain"].get<std::string>())
              << fmt::format("LibTorch          {}\n", info["libtorch"].get<std::string>())
              << fmt::format("backends          {}\n",
                             fmt::join(info["backends"].get<std::vector<std::string>>(), ", "))
              << fmt::format("CUDA              {}\n",
                             info["cuda"].get<bool>() ? "available" : "not available")
              << fmt::format("cores             {}\n", info["cores"].get<int>())
              << fmt::format("intra-op threads  {}\n", info["intra_op_threads"].get<int>())
              << fmt::format("inter-op threads  {}\n", info["inter_op_threads"].get<int>())
              << fmt::format("BLAS              {}\n", info["blas"].get<std::string>());
    return kExitSuccess;
  };
}

}  // namespace dtrain::cli
