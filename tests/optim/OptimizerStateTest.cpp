// Optimizer state by parameter name: saved from one optimizer and loaded into another over the
// same parameters listed in another order, the next steps are exactly those of the original.
#include "dtrain/optim/OptimizerState.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/optim/Optimizers.h"

namespace dtrain::optim {
namespace {

config::OptimConfig optimizer(const std::string& name) {
  config::OptimConfig c;
  c.name = name;
  c.lr = name == "lbfgs" ? 0.5 : 0.05;
  if (name == "sgd") c.momentum = 0.9;
  return c;
}

struct Problem {
  torch::Tensor a = torch::randn({5, 3}, torch::kDouble).requires_grad_();
  torch::Tensor b = torch::randn({3}, torch::kDouble).requires_grad_();
  NamedParameters named() const { return {{"a", a}, {"b", b}}; }
  NamedParameters reversed() const { return {{"b", b}, {"a", a}}; }
  torch::Tensor loss() const { return (a.sum(0) - 1).pow(2).sum() + (b * b).sum(); }
};

void step(torch::optim::Optimizer& opt, const Problem& p) {
  opt.step([&] {
    opt.zero_grad();
    auto l = p.loss();
    l.backward();
    return l;
  });
}

class OptimizerStateRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerStateRoundTrip, ContinuesExactlyUnderAnotherParameterOrder) {
  torch::manual_seed(3);
  Problem original;
  auto first = create_optimizer({original.a, original.b}, optimizer(GetParam()));
  for (int i = 0; i < 3; ++i) step(*first, original);
  const auto state = named_optimizer_state(*first, original.named());
  if (GetParam() == "lbfgs") {
    EXPECT_EQ(state.count("optimizer/lbfgs"), 1u);
  } else if (GetParam() == "sgd") {
    EXPECT_EQ(state.at("optimizer/a/momentum_buffer").sizes(), original.a.sizes());
  } else {
    EXPECT_EQ(state.at("optimizer/b/step").item<std::int64_t>(), 3);
    EXPECT_EQ(state.at("optimizer/a/exp_avg_sq").sizes(), original.a.sizes());
  }

  // A copy of the parameters; for lbfgs, whose history is one flat vector, in the same order.
  Problem copy;
  {
    torch::NoGradGuard no_grad;
    copy.a.copy_(original.a);
    copy.b.copy_(original.b);
  }
  const bool same_order = GetParam() == "lbfgs";
  auto second = same_order ? create_optimizer({copy.a, copy.b}, optimizer(GetParam()))
                           : create_optimizer({copy.b, copy.a}, optimizer(GetParam()));
  load_named_optimizer_state(*second, same_order ? copy.named() : copy.reversed(), state);
  for (int i = 0; i < 3; ++i) {
    step(*first, original);
    step(*second, copy);
  }
  EXPECT_TRUE(torch::equal(copy.a, original.a));
  EXPECT_TRUE(torch::equal(copy.b, original.b));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, OptimizerStateRoundTrip,
                         ::testing::Values("sgd", "adam", "adamw", "lbfgs"));

TEST(OptimizerState, LbfgsStateDoesNotLoadIntoAnotherOptimizer) {
  Problem p;
  auto lbfgs = create_optimizer({p.a, p.b}, optimizer("lbfgs"));
  step(*lbfgs, p);
  auto adam = create_optimizer({p.a, p.b}, optimizer("adam"));
  EXPECT_THROW(load_named_optimizer_state(*adam, p.named(), named_optimizer_state(*lbfgs, p.named())),
               std::invalid_argument);
}

TEST(OptimizerState, AShapeThatDoesNotFitIsRefusedNamingTheEntry) {
  Problem p;
  auto adam = create_optimizer({p.a, p.b}, optimizer("adam"));
  step(*adam, p);
  auto state = named_optimizer_state(*adam, p.named());
  state["optimizer/a/exp_avg"] = torch::zeros({2});
  try {
    load_named_optimizer_state(*adam, p.named(), state);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer state a/exp_avg has shape [2], the parameter [5, 3]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::optim
