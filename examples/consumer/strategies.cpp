// Every strategy that keeps the mathematics, over this project's own modules, built against an
// installed dtrain: on the ranks a launcher starts, each strategy trains a few steps on each rank's
// batch and must end with the weights one process reaches on the union of the ranks' batches.
//   dtrain launch --nproc-per-node 2 -- ./strategies
#include <torch/torch.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/comm/Backend.h"
#include "dtrain/config/Environment.h"
#include "dtrain/parallel/Strategies.h"

namespace {

namespace dp = dtrain::parallel;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(6, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 3))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

// The same weights on every rank (and for the reference): the same seed before building.
dtrain::models::NetworkPtr build(bool sequential) {
  torch::manual_seed(3);
  if (!sequential) return dtrain::models::network("net", Net());
  return dtrain::models::network(
      "seq", torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::Functional(torch::tanh),
                                   torch::nn::Linear(16, 3)));
}

dp::Training parts(bool sequential, dtrain::comm::CommunicatorPtr comm) {
  auto sgd = [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  return {build(sequential), sgd, dtrain::optim::create_loss("cross_entropy"), std::move(comm)};
}

// Step s's batch of 8 rows; rank r of `world` takes its slice.
torch::Tensor rows(const torch::Tensor& t, int rank, int world) {
  return t.chunk(world)[rank];
}

double max_difference(dp::Strategy& a, dp::Strategy& b) {
  double out = 0;
  const auto sa = a.model_state(), sb = b.model_state();
  for (const auto& [name, t] : sa) out = std::max(out, (t - sb.at(name)).abs().max().item<double>());
  return out;
}

}  // namespace

int main() {
  auto rendezvous = dtrain::comm::resolve_rendezvous({}, dtrain::config::process_environment());
  dtrain::comm::CommunicatorPtr comm = dtrain::comm::connect(dtrain::comm::BackendOptions{}, rendezvous);
  const int rank = comm->rank(), world = comm->size();
  using Make = std::function<std::unique_ptr<dp::Strategy>(dp::Training)>;
  const auto zero = [](int stage) {
    return [stage](dp::Training t) {
      dp::ZeroOptions o;
      o.stage = stage;
      return dp::make_zero(t, o);
    };
  };
  const auto pipe = [](dp::pipeline::ScheduleKind schedule) {
    return [schedule](dp::Training t) {
      dp::pipeline::PipelineOptions o;
      o.schedule = schedule;
      return dp::make_pipeline(t, o);
    };
  };
  const std::vector<std::tuple<std::string, bool, Make>> cases{
      {"data_parallel", false, [](dp::Training t) { return dp::make_data_parallel(t); }},
      {"zero stage 1", false, zero(1)},
      {"zero stage 2", false, zero(2)},
      {"zero stage 3", false, zero(3)},
      {"pipeline gpipe", true, pipe(dp::pipeline::ScheduleKind::GPipe)},
      {"pipeline 1f1b", true, pipe(dp::pipeline::ScheduleKind::OneFOneB)},
      {"dad", false, [](dp::Training t) { return dp::make_dad(t); }}};
  int failures = 0;
  for (const auto& [name, sequential, make] : cases) {
    auto strategy = make(parts(sequential, comm));
    auto reference = dp::make_local(parts(sequential, nullptr));
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(100 + step);
      const auto x = torch::randn({8, 6});
      const auto y = torch::randint(0, 3, {8});
      strategy->train_step({rows(x, rank, world), rows(y, rank, world)});
      reference->train_step({x, y});
    }
    const double difference = max_difference(*strategy, *reference);
    std::printf("strategies: rank %d of %d, %s: max difference from one process %.3g\n", rank, world,
                name.c_str(), difference);
    failures += difference > 1e-5;
  }
  return failures == 0 ? 0 : 1;
}
