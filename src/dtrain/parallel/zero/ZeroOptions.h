// The zero strategy's options, parallel.zero.* in a configuration, or given in code to make_zero
// (parallel/Strategies.h).
#pragma once

#include "dtrain/config/Options.h"

namespace dtrain::parallel {

// parallel.zero.*
struct ZeroOptions {
  // 1: optimizer state sharded; 2: and gradients (reduce-scattered during backward); 3: and
  // parameters (gathered per stage before its forward and its backward, freed after).
  int stage = 2;
  // Stage 3: gather the next stage's parameters while the current one computes (forward: the
  // next stage; backward: the one before).
  bool prefetch = true;
};

void describe_options(config::OptionVisitor& visitor, ZeroOptions& options);
// Throws std::invalid_argument when prefetch is changed for a stage that has nothing to prefetch.
void check(const ZeroOptions& options);

}  // namespace dtrain::parallel
