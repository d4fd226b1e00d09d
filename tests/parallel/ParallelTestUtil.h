// Shared pieces of the parallel layer's tests: small mlp and lenet5-shaped models, ranks as
// threads, and parameter comparisons.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/Registry.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel::testing {

// (batch, 1, 28, 28) -> (batch, 10)
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int hidden = 32)
      : fc1(register_module("fc1", torch::nn::Linear(784, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

// LeNet-5 on 28x28 inputs: (batch, 1, 28, 28) -> (batch, 10)
struct LeNet5Impl : torch::nn::Module {
  LeNet5Impl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 6, 5).padding(2)))),
        conv2(register_module("conv2", torch::nn::Conv2d(6, 16, 5))),
        fc1(register_module("fc1", torch::nn::Linear(16 * 5 * 5, 120))),
        fc2(register_module("fc2", torch::nn::Linear(120, 84))),
        fc3(register_module("fc3", torch::nn::Linear(84, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::max_pool2d(torch::relu(conv1(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2(h)), 2);
    return fc3(torch::relu(fc2(torch::relu(fc1(h.flatten(1))))));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(LeNet5);

struct TestModel {
  std::shared_ptr<torch::nn::Module> module;
  ForwardFn forward;
};

// Built on the calling thread from `seed`: torch's default generator is shared between threads.
inline TestModel make_model(const std::string& name, std::uint64_t seed, int mlp_hidden = 32) {
  torch::manual_seed(seed);
  if (name == "mlp") {
    Mlp m(mlp_hidden);
    return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); }};
  }
  LeNet5 m;
  return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); }};
}

inline torch::Tensor cross_entropy(const torch::Tensor& out, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(out, target);
}

using dtrain::testing::in_process_group;
using dtrain::testing::InProcessCommunicator;
using dtrain::testing::LoggedCall;
using dtrain::testing::run_threads;

// Runs fn(comm) on n threads, one communicator per rank (rank = comm->rank()).
using WorldRunner = std::function<void(int n, const std::function<void(comm::CommunicatorPtr)>& fn)>;

inline void run_in_process_world(int n, const std::function<void(comm::CommunicatorPtr)>& fn) {
  dtrain::testing::run_world(n, fn, dtrain::testing::WorldOptions::on("in-process"));
}

// max |a - b| / max |b| over each pair of tensors: relative to the tensor's scale, so entries near
// zero do not blow the ratio up.
inline double max_relative_difference(const std::vector<torch::Tensor>& a,
                                      const std::vector<torch::Tensor>& b) {
  TORCH_INTERNAL_ASSERT(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(b[i].abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

// The largest of difference(a's tensor, b's tensor) over the names of two named states
// (model_state(), optimizer states); a name or shape on one side only is a test failure.
inline double worst_named_difference(
    const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b,
    const std::function<double(const torch::Tensor&, const torch::Tensor&)>& difference) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (const auto& [name, t] : b) {
    const auto it = a.find(name);
    if (it == a.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    EXPECT_EQ(it->second.sizes(), t.sizes()) << name;
    worst = std::max(worst, difference(it->second, t));
  }
  return worst;
}

// The same over two named states: each tensor's difference relative to its largest magnitude,
// taken as at least `floor`.
inline double max_relative_difference(const std::map<std::string, torch::Tensor>& a,
                                      const std::map<std::string, torch::Tensor>& b, double floor = 1e-12) {
  return worst_named_difference(a, b, [floor](const torch::Tensor& x, const torch::Tensor& y) {
    return (x - y).abs().max().item<double>() / std::max(y.abs().max().item<double>(), floor);
  });
}

// max |a - b| over two named states, in float64.
inline double max_abs_difference(const std::map<std::string, torch::Tensor>& a,
                                 const std::map<std::string, torch::Tensor>& b) {
  return worst_named_difference(a, b, [](const torch::Tensor& x, const torch::Tensor& y) {
    return (x.to(torch::kDouble) - y.to(torch::kDouble)).abs().max().item<double>();
  });
}

inline std::vector<torch::Tensor> snapshot(const torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// cfg.model for (1, 28, 28) images of 10 classes, from `seed`, in `dtype`. Built on the calling
// thread: torch's default generator is shared between threads.
inline models::NetworkPtr build_model(const config::RunConfig& cfg, std::uint64_t seed,
                                      torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(seed);
  auto model = models::create_model(cfg.model, models::InputSpec::image(1, 28, 28, 10));
  model->to(dtype);
  return model;
}

// cfg.parallel.strategy over `model`, with cfg's optimizer and loss; comm null for one process.
inline std::unique_ptr<Strategy> build_strategy(const config::RunConfig& cfg, models::NetworkPtr model,
                                                comm::CommunicatorPtr comm) {
  return create_strategy(StrategyContext{std::move(model), optim::optimizer_factory(cfg.optim),
                                         optim::create_loss(cfg.optim.loss), std::move(comm), cfg.parallel});
}

}  // namespace dtrain::parallel::testing
