// The options of dad and rankdad, parallel.dad.* in a configuration, or given in code to make_dad
// and make_rankdad (parallel/Strategies.h).
#pragma once

#include "dtrain/config/Options.h"

namespace dtrain::parallel {

// parallel.dad.*, read by dad and rankdad.
struct DadOptions {
  int rank = 4;               // rank-dAD's components per layer at most
  int power_iterations = 10;  // rank-dAD: power iterations per component at most
  double tolerance = 1e-3;    // rank-dAD: a component stops moving at this (relative)
  bool automatic = false;     // "auto": per layer the cheapest of gradient, dAD (and rank-dAD)
  int auto_trial_steps = 5;   // auto: steps each candidate plan is timed, at most (0: choose by bytes alone)
  double bucket_mb = 25.0;    // the buckets of every other parameter
};

void describe_options(config::OptionVisitor& visitor, DadOptions& options);

}  // namespace dtrain::parallel
