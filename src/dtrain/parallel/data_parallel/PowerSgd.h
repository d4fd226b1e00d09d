// PowerSGD for DataParallel's buckets: which gradients are compressed, each matrix's warm-start Q
// and error-feedback memory, and a round's two all-reduces (P with the plain gradients, then Q).
// Internal to the data_parallel strategy; see Note [PowerSGD] in PowerSgd.cpp.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"
#include "dtrain/parallel/data_parallel/GradientBuckets.h"

namespace dtrain::parallel::detail {

class PowerSgd {
 public:
  // `params` and `buckets` are DataParallel's layout; they must outlive this object.
  PowerSgd(const PowerSgdOptions& options, const std::vector<ParamSlot>& params,
           const std::vector<Bucket>& buckets, comm::Communicator& comm);

  // Whether this round compresses: plain all-reduce comes first (options.start_round).
  bool compressing() const { return round_ >= options_.start_round; }
  // Bucket b's gradients are complete: adds the error memory, computes P = M Q for each
  // compressed matrix and launches the all-reduce of [plain gradients / n, P].
  void launch(std::size_t b, bool async_op);
  // Every bucket launched: waits for the first all-reduces, orthogonalises P, all-reduces
  // Q = M^T P / n and leaves in each gradient the mean over ranks: P Q^T for the compressed
  // matrices, the plain mean for the rest. Updates the error memories and warm-start Qs.
  void finish();
  // A synchronised round ended (compressed or plain).
  void end_round() { ++round_; }
  // After a failure: waits for whatever is still in flight, swallowing its errors.
  void wait_quietly();

  std::map<std::string, torch::Tensor> state() const;  // collective
  void load_state(const std::map<std::string, torch::Tensor>& state);
  DataParallel::CompressionSummary summary() const;

 private:
  // One gradient viewed as a (rows, cols) matrix: (out, in x kernel) for a convolution.
  struct Matrix {
    int slot = 0;
    std::int64_t rows = 0, cols = 0, rank = 0;
    std::int64_t p_offset = 0;  // into the bucket's first message, after the plain gradients
    std::int64_t q_offset = 0;  // into its second message
    torch::Tensor q;            // (cols, rank): the last round's mean Q, for the warm start
    torch::Tensor error;        // (rows, cols): what compression left out of this rank's gradient
  };
  struct Plan {
    std::vector<int> plain;  // slots reduced plainly
    std::vector<Matrix> matrices;
    std::int64_t plain_numel = 0;
    torch::Tensor first, first_wire;    // [plain gradients, P...]; the wire copy or undefined
    torch::Tensor second, second_wire;  // [Q...]
    comm::WorkPtr work;
  };

  torch::Tensor matrix_of(const Matrix& m) const;
  torch::Tensor draw_q(const Matrix& m) const;
  comm::WorkPtr allreduce(torch::Tensor& values, torch::Tensor& wire, bool async_op);

  PowerSgdOptions options_;
  const std::vector<ParamSlot>& params_;
  comm::Communicator& comm_;
  std::vector<Plan> plans_;  // one per bucket, in launch order
  std::int64_t round_ = 0;
};

}  // namespace dtrain::parallel::detail
