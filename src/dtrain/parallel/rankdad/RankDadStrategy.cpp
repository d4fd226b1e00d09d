// The `rankdad` strategy: dAD with each rank's Δᵀ X compressed to rank parallel.dad.rank by deflated
// power iteration before it is shared (DadStrategy in RankDad mode; options in parallel.dad.*).
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/dad/DadStrategy.h"

namespace dtrain::parallel {

DTRAIN_REGISTER_STRATEGY(rankdad,
                         StrategyInfo{
                             "rankdad",
                             "rank-dAD: each rank's Linear-layer gradient factored to rank parallel.dad.rank "
                             "and the factors shared (approximate; biases exact)",
                             /*exact=*/false, /*needs_communicator=*/true,
                             [](StrategyContext c) -> std::unique_ptr<Strategy> {
                               return std::make_unique<DadStrategy>(std::move(c), DadStrategy::Mode::RankDad);
                             },
                             /*options_section=*/"dad"});

}  // namespace dtrain::parallel
