// The strategies as objects over a model of one's own; see Strategies.h.
#include "dtrain/parallel/Strategies.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/OptionChecker.h"
#include "dtrain/config/Schema.h"
#include "dtrain/parallel/Registry.h"

namespace dtrain::parallel {
namespace {

// The context `dtrain train` would build for parallel.strategy `name` with these parts; the options
// of the section are set by the caller.
StrategyContext context_of(Training training, const std::string& name) {
  StrategyContext context;
  context.model = std::move(training.model);
  context.make_optimizer = std::move(training.optimizer);
  context.loss = std::move(training.loss);
  context.comm = std::move(training.comm);
  context.parallel.strategy = name;
  context.parallel.accumulation_steps = training.accumulation_steps;
  context.seed = training.seed;
  context.precision = training.precision;
  context.input = std::move(training.input);
  context.parallel.mesh = training.mesh;
  context.parallel.tensor = std::move(training.tensor);
  context.loss_name = std::move(training.loss_name);
  return context;
}

// Options given in code pass the checks a configuration file's pass: the same description checked
// in place, so an error names the key as parallel.<section>.<key>.
StrategyContext checked(StrategyContext context) {
  config::OptionChecker checker("parallel", "the strategy's options");
  try {
    config::describe_parallel(checker, context.parallel);
  } catch (const config::ConfigError& e) {
    // Where is this call, not a file; the key and the message are what the caller set.
    throw std::invalid_argument(e.message());
  }
  return context;
}

template <class Options>
std::unique_ptr<Strategy> make(Training training, const std::string& name, const std::string& section,
                               const Options& options) {
  auto context = context_of(std::move(training), name);
  context.parallel.options.get<Options>(section) = options;
  return create_strategy(checked(std::move(context)));
}

}  // namespace

std::unique_ptr<Strategy> make_local(Training training) {
  return create_strategy(checked(context_of(std::move(training), "local")));
}

std::unique_ptr<Strategy> make_data_parallel(Training training, DataParallelStrategyOptions options) {
  return make(std::move(training), "data_parallel", "data_parallel", options);
}

std::unique_ptr<Strategy> make_zero(Training training, ZeroOptions options) {
  return make(std::move(training), "zero", "zero", options);
}

std::unique_ptr<Strategy> make_pipeline(Training training, pipeline::PipelineOptions options) {
  return make(std::move(training), "pipeline", "pipeline", options);
}

std::unique_ptr<Strategy> make_dad(Training training, DadOptions options) {
  return make(std::move(training), "dad", "dad", options);
}

std::unique_ptr<Strategy> make_rankdad(Training training, DadOptions options) {
  return make(std::move(training), "rankdad", "dad", options);
}

std::unique_ptr<Strategy> make_decentralized(Training training, DecentralizedOptions options,
                                             GraphOptions graph) {
  auto context = context_of(std::move(training), "decentralized");
  context.parallel.options.get<DecentralizedOptions>("decentralized") = options;
  context.parallel.options.get<GraphOptions>("graph") = graph;
  return create_strategy(checked(std::move(context)));
}

}  // namespace dtrain::parallel
