// DataParallel: PyTorch DDP's gradient synchroniser (the Reducer) for the C++ frontend. Rank 0's
// weights are broadcast at construction; during backward, gradients land in flat buckets whose
// all-reduce starts as soon as the bucket is complete, overlapping communication with the rest
// of backward; finish() waits for the last bucket. Usable from any training loop:
//
//   dtrain::parallel::DataParallel dp(model, comm);   // broadcasts rank 0's weights, installs hooks
//   loss.backward();                                   // buckets all-reduce while backward runs
//   dp.finish();                                       // waits for the last bucket
//   optimizer.step();
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/parallel/data_parallel/DataParallelStrategyOptions.h"

namespace dtrain::parallel {

// GradCompression, how gradients travel, is the strategy option's enum (DataParallelStrategyOptions.h).
std::string to_string(GradCompression compression);
// Parses "none", "fp16", "bf16", "powersgd"; throws std::invalid_argument listing them otherwise.
GradCompression parse_grad_compression(const std::string& name);

// PowerSGD (Vogels et al. 2019; PyTorch's powerSGD_hook). See Note [PowerSGD] in PowerSgd.cpp.
struct PowerSgdOptions {
  // Rank r of the approximation P Q^T of each (rows, cols) gradient matrix; 1 to 4 is typical.
  int rank = 1;
  // Synchronised rounds (finish() calls) reduced by plain all-reduce before compression starts;
  // PyTorch suggests about 10% of training. The authors' library starts after 100.
  std::int64_t start_round = 100;
  // A matrix is compressed only when (rows + cols) r x min_compression < rows x cols; the
  // others (and every vector: biases, normalisation weights) go through plain all-reduce.
  double min_compression = 2.0;
  // Start each round's power iteration from the last round's Q (else a fresh random Q).
  bool warm_start = true;
  // Keep what compression left out of each rank's gradient and add it to the next one.
  bool error_feedback = true;
  // How P, Q and the plainly reduced gradients travel: None (the gradients' own dtype), Fp16 or
  // Bf16 (rounded for the wire only; the arithmetic stays in the gradients' dtype).
  GradCompression wire = GradCompression::None;
  // Seeds the random Q every rank draws alike (the run's seed).
  std::uint64_t seed = 0;
};

struct DataParallelOptions {
  // Gradient bucket capacity in megabytes (2^20 bytes); a parameter larger than this gets a bucket
  // of its own. Small buckets start communication earlier, large ones cost fewer messages.
  double bucket_mb = 25.0;
  GradCompression compression = GradCompression::None;
  // Read when compression is PowerSgd.
  PowerSgdOptions powersgd;
  // Broadcast rank 0's parameters and buffers at construction.
  bool broadcast_initial_state = true;
  // Check at construction that every rank has the same parameter and buffer names, shapes and
  // dtypes, and fail naming the first difference.
  bool check_same_module = true;
  // Parameters (by dotted name) left out of the buckets: whoever excludes them synchronises their
  // gradients itself (dAD rebuilds the Linear layers' weight gradients from shared activations).
  std::set<std::string> exclude;
};

// Where the time of the last synchronised step went, for the trainer's compute/communication split.
struct SyncTiming {
  double finish_wait_seconds = 0.0;      // blocked in finish() waiting for all-reduces
  int buckets_launched_in_backward = 0;  // launched before finish(): the overlapped ones
};

class DataParallel {
 public:
  // Collective: every rank constructs its DataParallel at the same point. The module must already
  // be on its device; parameters are not copied, the hooks and buckets refer to them.
  DataParallel(std::shared_ptr<torch::nn::Module> module, comm::CommunicatorPtr comm,
               DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(DataParallel&&) noexcept;
  DataParallel& operator=(DataParallel&&) noexcept;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Waits for every bucket's all-reduce and leaves in each parameter's grad() the mean over
  // ranks. Buckets with a parameter that got no gradient in this backward (unused in forward, or
  // frozen by control flow) are launched here with that parameter's slot zero (or its locally
  // accumulated gradient), so ranks never wait for each other forever. A no-op while sync is off.
  // grad() of every bucketed parameter is a view into its bucket: no copy-back is needed, and
  // zero_grad() keeps that view; after set-to-none the next backward copies into it once.
  void finish();

  // With sync off, backward only accumulates gradients locally (DDP's no_sync()); the next
  // backward with sync on all-reduces the accumulated sum. Gradient accumulation over k
  // micro-batches: sync off for the first k-1 backwards, on for the last, then finish().
  void set_sync(bool enabled);
  bool sync() const;

  // RAII: sync off for the guard's lifetime, restored after.
  class NoSync {
   public:
    explicit NoSync(DataParallel& dp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DataParallel& dp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // A few values (at most kMaxCarriedValues, e.g. the step's loss) reduced to their mean over
  // ranks together with this synchronised round's gradients: they ride in the last bucket's
  // all-reduce instead of costing a collective of their own. Call with sync on, before the
  // backward that synchronises (the last bucket must not have been launched yet); after finish(),
  // carried_values() holds the means. With compression they travel in a separate float32
  // all-reduce so that 16-bit rounding does not touch them.
  static constexpr std::int64_t kMaxCarriedValues = 8;
  void carry_values(const torch::Tensor& values);
  // The means of the values carried in the last finished round; undefined if none were carried.
  torch::Tensor carried_values() const;

  // The weight of this rank's gradients (and carried values) in the synchronised rounds that follow:
  // every rank contributes weight_r * g_r / world, so the result is sum_r weight_r * g_r / world.
  // 1 by default (the plain mean); Note [Join] sets each rank's share of the step's samples times
  // the world size, and 0 for a rank without data. Not with compression powersgd (refused).
  void set_contribution(double weight);

  // Collective: broadcasts rank 0's buffers (BatchNorm running statistics) to every rank.
  void sync_buffers();

  // What a resume needs of the compression's own state, by key ("round", "q/<parameter>",
  // "error/<parameter>"; see Note [PowerSGD state in checkpoints] in PowerSgd.cpp); empty unless
  // compression is powersgd. Collective (the error memories are averaged over ranks).
  std::map<std::string, torch::Tensor> compression_state() const;
  // Takes such a state; keys it does not know are refused, a Q of another rank is drawn afresh.
  void load_compression_state(const std::map<std::string, torch::Tensor>& state);
  // With powersgd: how many gradient tensors are compressed and how many go plainly, and the
  // elements one compressed round sends against the plain all-reduce's.
  struct CompressionSummary {
    int compressed_tensors = 0;
    int plain_tensors = 0;
    std::int64_t elements = 0;       // of every bucketed gradient
    std::int64_t sent_elements = 0;  // P, Q and the plain gradients
  };
  CompressionSummary compression_summary() const;

  torch::nn::Module& module();
  const std::shared_ptr<torch::nn::Module>& module_ptr() const;
  comm::Communicator& communicator();
  const DataParallelOptions& options() const;

  // The buckets, in launch order: each holds parameter names, last-registered first.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  SyncTiming last_sync_timing() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::parallel
