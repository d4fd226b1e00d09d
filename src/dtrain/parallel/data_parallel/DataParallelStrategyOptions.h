// The data_parallel strategy's options, parallel.data_parallel.* in a configuration, or given in
// code to make_data_parallel (parallel/Strategies.h).
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/config/Options.h"

namespace dtrain::parallel {

// parallel.data_parallel.*
struct DataParallelStrategyOptions {
  // Gradient bucket capacity in megabytes; PyTorch DDP's default is 25.
  double bucket_mb = 25.0;
  // Gradients on the wire: none | fp16 | bf16 (halves the bytes, rounds to 16 bits) | powersgd
  // (a rank-r approximation of each weight matrix; Note [PowerSGD] in PowerSgd.cpp).
  std::string compression = "none";
  // PowerSGD's settings (PowerSgdOptions), refused with any other compression: the rank r; the
  // steps all-reduced plainly before compression starts (synchronised rounds: each L-BFGS
  // evaluation is one); the compression rate below which a matrix goes plainly; warm start and
  // error feedback; and how P, Q and the plain gradients travel (none = float32, fp16, bf16).
  int powersgd_rank = 1;
  std::int64_t powersgd_start_step = 100;
  double powersgd_min_compression = 2.0;
  bool powersgd_warm_start = true;
  bool powersgd_error_feedback = true;
  std::string powersgd_wire = "none";
  // Broadcast rank 0's buffers (BatchNorm statistics) before every step, as DDP's
  // broadcast_buffers does; costs nothing for models without buffers.
  bool broadcast_buffers = true;
};

void describe_options(config::OptionVisitor& visitor, DataParallelStrategyOptions& options);
// Throws std::invalid_argument naming the first powersgd_* option set while compression is not
// powersgd.
void check(const DataParallelStrategyOptions& options);

}  // namespace dtrain::parallel
