// The data_parallel strategy's options, parallel.data_parallel.* in a configuration, or given in
// code to make_data_parallel (parallel/Strategies.h).
#pragma once

#include <cstdint>

#include "dtrain/config/Options.h"
#include "dtrain/util/EnumNames.h"

namespace dtrain::parallel {

// How gradients travel. fp16 and bf16 halve the bytes on the wire and change the mathematics
// slightly (the values are rounded to 16 bits), as DDP's fp16/bf16 communication hooks do;
// powersgd sends a low-rank approximation of each weight matrix (PowerSgd.h). The names are
// parallel.data_parallel.compression's.
enum class GradCompression { None, Fp16, Bf16, PowerSgd };
inline constexpr util::EnumNames<GradCompression, 4> kGradCompressionNames{
    {{{GradCompression::None, "none"},
      {GradCompression::Fp16, "fp16"},
      {GradCompression::Bf16, "bf16"},
      {GradCompression::PowerSgd, "powersgd"}}}};

// How PowerSGD's factors and plain gradients travel (parallel.data_parallel.powersgd_wire):
// float32 (none), or rounded to fp16 or bf16 for the wire only.
enum class PowerSgdWire { None, Fp16, Bf16 };
inline constexpr util::EnumNames<PowerSgdWire, 3> kPowerSgdWireNames{
    {{{PowerSgdWire::None, "none"}, {PowerSgdWire::Fp16, "fp16"}, {PowerSgdWire::Bf16, "bf16"}}}};

// parallel.data_parallel.*
struct DataParallelStrategyOptions {
  // Gradient bucket capacity in megabytes; PyTorch DDP's default is 25.
  double bucket_mb = 25.0;
  // Gradients on the wire: None | Fp16 | Bf16 (halves the bytes, rounds to 16 bits) | PowerSgd
  // (a rank-r approximation of each weight matrix; Note [PowerSGD] in PowerSgd.cpp).
  GradCompression compression = GradCompression::None;
  // PowerSGD's settings (PowerSgdOptions), refused with any other compression: the rank r; the
  // steps all-reduced plainly before compression starts (synchronised rounds: each L-BFGS
  // evaluation is one); the compression rate below which a matrix goes plainly; warm start and
  // error feedback; and how P, Q and the plain gradients travel (None = float32, Fp16, Bf16).
  int powersgd_rank = 1;
  std::int64_t powersgd_start_step = 100;
  double powersgd_min_compression = 2.0;
  bool powersgd_warm_start = true;
  bool powersgd_error_feedback = true;
  PowerSgdWire powersgd_wire = PowerSgdWire::None;
  // Broadcast rank 0's buffers (BatchNorm statistics) before every step, as DDP's
  // broadcast_buffers does; costs nothing for models without buffers.
  bool broadcast_buffers = true;
};

void describe_options(config::OptionVisitor& visitor, DataParallelStrategyOptions& options);
// Throws std::invalid_argument naming the first powersgd_* option set while compression is not
// powersgd.
void check(const DataParallelStrategyOptions& options);

}  // namespace dtrain::parallel
