// Memory per rank of the zero strategy (and data_parallel) against ZeRO's accounting: builds an
// mlp and the strategy as the trainer does, takes a few Adam steps on random batches, and prints
// one JSON line per rank: memory_footprint() (parameters, gradients, optimizer state), ZeRO's
// figure for it (fp32 Adam: stage 1 4Ψ+4Ψ+8Ψ/N, stage 2 4Ψ+12Ψ/N, stage 3 16Ψ/N, data_parallel
// 16Ψ), and resident memory: getrusage's ru_maxrss (the process's peak, which includes building
// the whole model before the strategy shards it) and VmHWM over the steps alone (the peak is
// reset through /proc/self/clear_refs once the strategy is built), each against the resident
// memory before the model existed; and the buffers the zero strategy states (Note [Reused
// buffers] in ShardedUnits.h, Note [Gradient buffers] in ZeroStrategy.cpp), which the goal allows
// on top of ZeRO's figure. Start
// one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (bench/zero_memory.sh).
//   zero_memory --strategy zero --stage 3 --hidden 4096,4096,4096,2560 --steps 3 --batch 8
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

#include "BenchCommon.h"
#include "dtrain/comm/Backend.h"
#include "dtrain/config/Environment.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/zero/ZeroStrategy.h"

namespace {

// Resident bytes from /proc/self/status: VmRSS (now) or VmHWM (the peak since the last reset).
std::uint64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream in(line.substr(field.size() + 1));
      std::uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

std::uint64_t max_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // kilobytes on Linux
}

// Linux: writing 5 resets the peak resident set size (VmHWM) to the current one.
bool reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  return static_cast<bool>(clear);
}

}  // namespace

int main(int argc, char** argv) try {
  const bench::Flags flags(argc, argv);
  const auto strategy_name = flags.get("strategy", "zero");
  const int stage = flags.get_int("stage", 2);
  const auto hidden = flags.get("hidden", "4096,4096,4096,2560");
  const int steps = flags.get_int("steps", 3);
  const int batch = flags.get_int("batch", 8);
  torch::set_num_threads(flags.get_int("threads", 1));

  const auto env = dtrain::config::process_environment();
  const auto rendezvous = dtrain::comm::resolve_rendezvous({}, env);
  dtrain::comm::BackendOptions backend;
  backend.name = "gloo";
  std::shared_ptr<dtrain::comm::Communicator> comm = dtrain::comm::connect(backend, rendezvous);
  const int n = comm->size();
  const auto baseline = status_bytes("VmRSS");

  std::vector<std::string> overrides{"parallel.strategy=" + strategy_name, "optim.name=adam",
                                     "model.name=mlp", "model.hidden=[" + hidden + "]"};
  if (strategy_name == "zero") overrides.push_back("parallel.zero.stage=" + std::to_string(stage));
  const auto cfg = dtrain::config::parse_run_config("", "<zero_memory>", overrides);
  torch::manual_seed(1);
  dtrain::parallel::StrategyContext context{
      dtrain::models::create_model(cfg.model, dtrain::models::InputSpec::image(1, 28, 28, 10)),
      dtrain::optim::optimizer_factory(cfg.optim), dtrain::optim::create_loss(cfg.optim.loss), comm,
      cfg.parallel};
  std::uint64_t psi = 0;
  double largest_parameter = 0;
  for (const auto& p : context.model->parameters()) {
    psi += static_cast<std::uint64_t>(p.numel());
    largest_parameter = std::max(largest_parameter, static_cast<double>(p.numel()));
  }
  auto strategy = dtrain::parallel::create_strategy(std::move(context));
  const bool peak_reset = reset_peak();
  const auto after_build = status_bytes("VmRSS");

  const auto inputs = torch::randn({batch, 1, 28, 28});
  const auto targets = torch::randint(0, 10, {batch});
  for (int s = 0; s < steps; ++s) strategy->train_step({inputs, targets});
  const auto f = strategy->memory_footprint();

  // The buffers a zero step holds beyond ZeRO's figure: the ones it reuses every step (Note
  // [Reused buffers]; stage 1 two shard-sized ones, stage 2 also two units' flat gradients, stage 3
  // those gradients and two gathered units), as the strategy reports them; autograd's own gradient
  // of the largest parameter W while it is added into its unit's buffer; LibTorch's Adam step, which
  // allocates two temporaries the size of a shard (the square root of exp_avg_sq, then it divided
  // by the bias correction) that glibc keeps resident after it frees them; and on more than two
  // ranks gloo's ring scratch, one shard of the largest unit U per reduce-scatter on each of c10d's
  // two worker threads, which the backend keeps (Note [Cached Gloo buffers]).
  double stated_buffers = 0, pooled = 0, adam_temporaries = 0;
  if (const auto* zero = dynamic_cast<const dtrain::parallel::ZeroStrategy*>(strategy.get())) {
    double U = 0, W = 0;
    std::int64_t bytes = 4;
    for (const auto& unit : zero->layouts()) {
      U = std::max(U, static_cast<double>(unit.padded));
      for (const auto& p : unit.params) {
        W = std::max(W, static_cast<double>(p.numel));
        bytes = p.param.element_size();
      }
    }
    pooled = static_cast<double>(zero->buffer_bytes());
    adam_temporaries = 2.0 * bytes * U / n;
    stated_buffers = pooled + bytes * W + adam_temporaries + (n > 2 ? 2.0 * bytes * U / n : 0.0);
  }
  if (strategy_name == "data_parallel") {
    // Its gradients are the buckets' flat buffers (in the figure); Adam's step allocates two
    // temporaries the size of the parameter it updates, the largest one's at most.
    adam_temporaries = 2.0 * 4 * largest_parameter;
    stated_buffers = adam_temporaries;
  }
  // ZeRO's accounting for fp32 Adam (Rajbhandari et al. 2020, §3 with K = 8: no fp16 copy here).
  const double P = static_cast<double>(psi);
  double zero_figure = 16 * P;
  if (strategy_name == "zero") {
    zero_figure = stage == 1 ? 8 * P + 8 * P / n : stage == 2 ? 4 * P + 12 * P / n : 16 * P / n;
  }
  std::printf(
      "{\"rank\": %d, \"world\": %d, \"strategy\": \"%s\", \"stage\": %d, \"psi\": %llu, "
      "\"footprint_parameters\": %llu, \"footprint_gradients\": %llu, \"footprint_optimizer\": %llu, "
      "\"footprint_total\": %llu, \"zero_accounting\": %.0f, \"stated_buffers\": %.0f, "
      "\"pooled_buffers\": %.0f, \"adam_temporaries\": %.0f, \"rss_baseline\": %llu, "
      "\"rss_after_build\": %llu, \"ru_maxrss\": %llu, \"steps_peak_rss\": %llu, \"peak_reset\": %s}\n",
      comm->rank(), n, strategy_name.c_str(), strategy_name == "zero" ? stage : 0,
      static_cast<unsigned long long>(psi), static_cast<unsigned long long>(f.parameters),
      static_cast<unsigned long long>(f.gradients), static_cast<unsigned long long>(f.optimizer_state),
      static_cast<unsigned long long>(f.total()), zero_figure, stated_buffers, pooled, adam_temporaries,
      static_cast<unsigned long long>(baseline), static_cast<unsigned long long>(after_build),
      static_cast<unsigned long long>(max_rss_bytes()),
      static_cast<unsigned long long>(status_bytes("VmHWM")), peak_reset ? "true" : "false");
  std::fflush(stdout);
  comm->barrier();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "zero_memory: %s\n", e.what());
  return 1;
}
