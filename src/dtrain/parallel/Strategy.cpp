// The strategy factory: the one place that turns parallel.strategy into a Strategy.
#include "dtrain/parallel/Strategy.h"

#include <fmt/format.h>

#include <stdexcept>

#include "dtrain/parallel/DataParallel.h"
#include "dtrain/parallel/DataParallelStrategy.h"
#include "dtrain/parallel/LocalStrategy.h"

namespace dtrain::parallel {

Strategy::~Strategy() = default;

std::unique_ptr<Strategy> create_strategy(const config::ParallelConfig& config,
                                          std::shared_ptr<torch::nn::Module> module, ForwardFn forward,
                                          comm::CommunicatorPtr comm) {
  if (config.strategy == "local") {
    return std::make_unique<LocalStrategy>(std::move(module), std::move(forward),
                                           LocalOptions{config.accumulation_steps}, std::move(comm));
  }
  if (config.strategy == "data_parallel") {
    if (!comm) {
      throw std::invalid_argument(
          "parallel.strategy data_parallel needs a communicator; connect with comm::connect() first, or use "
          "strategy local");
    }
    DataParallelStrategyOptions options;
    options.data_parallel.bucket_mb = config.bucket_mb;
    options.data_parallel.compression = parse_grad_compression(config.compression);
    options.accumulation_steps = config.accumulation_steps;
    return std::make_unique<DataParallelStrategy>(std::move(module), std::move(forward), std::move(comm),
                                                  options);
  }
  throw std::invalid_argument(
      fmt::format("unknown parallel.strategy '{}'; expected one of local, data_parallel", config.strategy));
}

}  // namespace dtrain::parallel
