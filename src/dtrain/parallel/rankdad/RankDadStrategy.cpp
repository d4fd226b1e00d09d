// The `rankdad` strategy: dAD with each rank's Δᵀ X compressed to rank parallel.dad.rank by deflated
// power iteration before it is shared (DadStrategy in RankDad mode; options in parallel.dad.*).
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/dad/DadStrategy.h"

namespace dtrain::parallel {

namespace {

StrategyInfo rankdad_info() {
  StrategyInfo info{"rankdad",
                    "rank-dAD: each rank's Linear-layer gradient factored to rank parallel.dad.rank and the "
                    "factors shared (approximate; biases exact)",
                    /*exact=*/false,
                    /*needs_communicator=*/true,
                    [](StrategyContext c) -> std::unique_ptr<Strategy> {
                      return std::make_unique<DadStrategy>(std::move(c), DadStrategy::Mode::RankDad);
                    },
                    /*options_section=*/"dad"};
  auto& can = info.capabilities;
  can.fixed_because = "its members train models of their own";
  can.fp16 = true;
  can.lbfgs = true;
  info.mesh.because =
      "every rank keeps the whole model and exchanges compressed layer gradients with all the others";
  info.mesh.implied = [](const config::ParallelConfig&, int world) {
    return std::optional<MeshShape>(MeshShape{1, world, 1});
  };
  return info;
}

}  // namespace

DTRAIN_REGISTER_STRATEGY(rankdad, rankdad_info());

}  // namespace dtrain::parallel
