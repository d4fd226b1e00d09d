// The Strategy contract's defaults.
#include "dtrain/parallel/Strategy.h"

namespace dtrain::parallel {

Strategy::~Strategy() = default;

std::vector<EvalModel> Strategy::eval_models() const {
  return {EvalModel{"model", -1}};
}

}  // namespace dtrain::parallel
