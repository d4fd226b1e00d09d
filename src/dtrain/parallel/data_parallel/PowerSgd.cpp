// PowerSGD's rounds over DataParallel's buckets. See Note [PowerSGD] and Note [PowerSGD state in
// checkpoints].
#include "dtrain/parallel/data_parallel/PowerSgd.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace dtrain::parallel::detail {

// Note [PowerSGD]
// Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
// Distributed Optimization" (NeurIPS 2019), as PyTorch's ddp_comm_hooks/powerSGD_hook.py runs it.
// Each gradient of two or more dimensions is viewed as a matrix M of (shape[0], the rest) rows and
// columns: (out, in x kh x kw) for a convolution, as PyTorch and the authors do. It is compressed
// at rank r = min(rows, cols, powersgd_rank) when (rows + cols) r x min_compression < rows x cols
// (PyTorch's _should_compress); the rest, every vector among them, is all-reduced plainly. A
// compressed round, per bucket:
//   M = g + e                          error feedback: what the last round left out (e = 0 first)
//   Q                                  the last round's mean Q (warm start), or drawn from N(0, 1)
//   P = M orth(Q)                      all-reduced with the plain gradients, both divided by n
//   P^ = orth(P), Q = M^T P^ / n       all-reduced: Q = mean(M)^T P^
//   g := P^ Q^T = P^ P^T mean(M),  e := M - P^ Q^T
// so each rank sends (rows + cols) r elements for a matrix instead of rows x cols, and at full
// rank P^ spans M's columns and the round returns mean(M) exactly, up to rounding. Every rank draws
// the same random Q with a generator of its own seeded from the run's seed, the round and the
// parameter's index: no communication, and the training's random stream is left alone. P and Q
// reach every rank with the same bits (every backend's all-reduce gives all ranks one result), so
// every rank computes the same P^ and the same update; the error memories are each rank's own.
// orth() is a Householder QR (LibTorch's linalg_qr) at every rank r: PyTorch uses Gram-Schmidt up
// to r = 2, which divides by a column's norm and needs an epsilon when a gradient is zero; QR's
// columns are orthonormal for any input (a zero gradient gives P^ Q^T = 0).
// What differs from PyTorch's hook: the plain gradients ride in the P all-reduce (one collective
// less per bucket); error memory is kept for the compressed matrices only (PyTorch keeps it for
// the whole bucket, where the plain part's memory, g - mean(g), cancels in the sum); P and Q are
// computed in the gradients' dtype and only rounded to 16 bits for the wire (PyTorch's
// fp16_compress_wrapper around the hook computes them in fp16); no batching of same-shaped
// matrices; rounds count synchronised backwards (an L-BFGS step counts each evaluation); and
// compression may start at round 0 (PyTorch needs 2 because DDP rebuilds its buckets after the
// first iteration; ours never change). The authors' library (epfml/powersgd) takes one matrix
// product and one all-reduce per step, alternating between P and Q; we take both, the paper's
// Algorithm 1, so that a round is exact at full rank.
// Order: the first all-reduces launch in bucket order as the buckets complete (Note [Bucket
// launch order]); finish() then issues the Q all-reduces in bucket order: the same sequence of
// collectives on every rank.
//
// Note [PowerSGD state in checkpoints]
// The update depends on the ranks' error memories only through their mean: P = mean(M) Q and
// Q = mean(M)^T P^, with mean(M) = mean(g) + mean(e). A checkpoint therefore holds the mean error
// of each matrix (one all-reduce when saving), the warm-start Q (the same on every rank) and the
// round counter, under strategy/data_parallel/powersgd/{round, q/<parameter>, error/<parameter>};
// every rank of the resumed run takes the mean error as its own. The resumed run computes the
// updates the uninterrupted one would have (up to rounding), at any world size, from one copy of
// the state rather than one per rank. A checkpoint without this state (plain data_parallel,
// local) starts PowerSGD afresh at round 0.

namespace {

torch::Tensor orthogonalised(const torch::Tensor& a) {
  return std::get<0>(at::linalg_qr(a, "reduced"));
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

PowerSgd::PowerSgd(const PowerSgdOptions& options, const std::vector<ParamSlot>& params,
                   const std::vector<Bucket>& buckets, comm::Communicator& comm)
    : options_(options), params_(params), comm_(comm) {
  if (options.rank < 1) {
    throw std::invalid_argument(fmt::format("PowerSGD: rank must be at least 1, got {}", options.rank));
  }
  if (options.start_round < 0 || !(options.min_compression >= 0)) {
    throw std::invalid_argument("PowerSGD: start_round and min_compression must not be negative");
  }
  torch::NoGradGuard no_grad;
  for (const auto& bucket : buckets) {
    Plan plan;
    std::int64_t p_numel = 0, q_numel = 0;
    for (int i : bucket.params) {
      const auto& param = params[i].param;
      if (param.dim() < 2) {
        plan.plain.push_back(i);
        plan.plain_numel += param.numel();
        continue;
      }
      Matrix m;
      m.slot = i;
      m.rows = param.size(0);
      m.cols = param.numel() / m.rows;
      m.rank = std::min<std::int64_t>({m.rows, m.cols, options.rank});
      const double compressed = static_cast<double>(m.rows + m.cols) * m.rank;
      if (!(compressed * options.min_compression < static_cast<double>(m.rows * m.cols))) {
        plan.plain.push_back(i);
        plan.plain_numel += param.numel();
        continue;
      }
      m.p_offset = p_numel;
      m.q_offset = q_numel;
      p_numel += m.rows * m.rank;
      q_numel += m.cols * m.rank;
      if (options.error_feedback) m.error = torch::zeros({m.rows, m.cols}, param.options());
      plan.matrices.push_back(std::move(m));
    }
    const auto values = bucket.buffer.options();
    plan.first = torch::zeros({plan.plain_numel + p_numel}, values);
    plan.second = torch::zeros({q_numel}, values);
    if (options.wire != GradCompression::None) {
      plan.first_wire = torch::zeros({plan.first.numel()}, values.dtype(wire_dtype(options.wire)));
      plan.second_wire = torch::zeros({plan.second.numel()}, values.dtype(wire_dtype(options.wire)));
    }
    plans_.push_back(std::move(plan));
  }
}

torch::Tensor PowerSgd::matrix_of(const Matrix& m) const {
  return params_[m.slot].view.view({m.rows, m.cols});
}

torch::Tensor PowerSgd::draw_q(const Matrix& m) const {
  // See Note [PowerSGD]: the same draw on every rank, from the run's seed, the round and the slot.
  const auto seed = splitmix(splitmix(splitmix(options_.seed) ^ static_cast<std::uint64_t>(round_)) ^
                             static_cast<unsigned>(m.slot));
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto& param = params_[m.slot].param;
  return at::randn({m.cols, m.rank}, generator, param.options().device(torch::kCPU)).to(param.device());
}

comm::WorkPtr PowerSgd::allreduce(torch::Tensor& values, torch::Tensor& wire, bool async_op) {
  if (!wire.defined()) return comm_.allreduce(values, comm::ReduceOp::Sum, async_op);
  wire.copy_(values);
  return comm_.allreduce(wire, comm::ReduceOp::Sum, async_op);
}

void PowerSgd::launch(std::size_t b, bool async_op) {
  torch::NoGradGuard no_grad;
  auto& plan = plans_.at(b);
  const double n = comm_.size();
  std::int64_t offset = 0;
  for (int i : plan.plain) {
    const auto& view = params_[i].view;
    plan.first.narrow(0, offset, view.numel()).copy_(view.reshape({-1})).div_(n);
    offset += view.numel();
  }
  for (auto& m : plan.matrices) {
    auto matrix = matrix_of(m);
    if (options_.error_feedback) matrix.add_(m.error);
    if (!options_.warm_start || !m.q.defined()) m.q = draw_q(m);
    auto p = plan.first.narrow(0, plan.plain_numel + m.p_offset, m.rows * m.rank).view({m.rows, m.rank});
    at::mm_out(p, matrix, orthogonalised(m.q));
    p.div_(n);
  }
  plan.work = allreduce(plan.first, plan.first_wire, async_op);
}

void PowerSgd::finish() {
  torch::NoGradGuard no_grad;
  const double n = comm_.size();
  for (auto& plan : plans_) {
    TORCH_INTERNAL_ASSERT(plan.work, "PowerSGD: a bucket was not launched");
    plan.work->wait();
    plan.work.reset();
    if (plan.first_wire.defined()) plan.first.copy_(plan.first_wire);
    std::int64_t offset = 0;
    for (int i : plan.plain) {
      auto& view = params_[i].view;
      view.copy_(plan.first.narrow(0, offset, view.numel()).view_as(view));
      offset += view.numel();
    }
    for (auto& m : plan.matrices) {
      auto p = plan.first.narrow(0, plan.plain_numel + m.p_offset, m.rows * m.rank).view({m.rows, m.rank});
      p.copy_(orthogonalised(p));
      auto q = plan.second.narrow(0, m.q_offset, m.cols * m.rank).view({m.cols, m.rank});
      at::mm_out(q, matrix_of(m).t(), p);
      q.div_(n);
    }
    if (!plan.matrices.empty()) plan.work = allreduce(plan.second, plan.second_wire, /*async_op=*/true);
  }
  for (auto& plan : plans_) {
    if (!plan.work) continue;
    plan.work->wait();
    plan.work.reset();
    if (plan.second_wire.defined()) plan.second.copy_(plan.second_wire);
    for (auto& m : plan.matrices) {
      auto p = plan.first.narrow(0, plan.plain_numel + m.p_offset, m.rows * m.rank).view({m.rows, m.rank});
      auto q = plan.second.narrow(0, m.q_offset, m.cols * m.rank).view({m.cols, m.rank});
      auto matrix = matrix_of(m);
      const auto approximation = at::mm(p, q.t());
      if (options_.error_feedback) at::sub_out(m.error, matrix, approximation);
      matrix.copy_(approximation);
      if (options_.warm_start) m.q = q.clone();
    }
  }
}

void PowerSgd::wait_quietly() {
  for (auto& plan : plans_) {
    if (!plan.work) continue;
    try {
      plan.work->wait();
    } catch (const std::exception&) {
      // Already failed; the buffers only need to outlive the backend's use of them.
    }
    plan.work.reset();
  }
}

std::map<std::string, torch::Tensor> PowerSgd::state() const {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> out;
  out["round"] = torch::tensor({round_}, torch::kLong);
  // Before the first compressed round there is nothing but the counter.
  if (round_ <= options_.start_round) return out;
  for (const auto& plan : plans_) {
    for (const auto& m : plan.matrices) {
      const auto& name = params_[m.slot].name;
      if (options_.warm_start && m.q.defined()) out["q/" + name] = m.q.clone();
      if (!m.error.defined()) continue;
      // See Note [PowerSGD state in checkpoints].
      auto mean = m.error.clone();
      comm_.allreduce(mean, comm::ReduceOp::Sum);
      out["error/" + name] = mean.div_(comm_.size());
    }
  }
  return out;
}

void PowerSgd::load_state(const std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  std::map<std::string, Matrix*> by_name;
  for (auto& plan : plans_) {
    for (auto& m : plan.matrices) by_name[params_[m.slot].name] = &m;
  }
  for (const auto& [key, value] : state) {
    if (key == "round") {
      round_ = value.item<std::int64_t>();
      continue;
    }
    const auto slash = key.find('/');
    const auto field = key.substr(0, slash);
    const auto name = slash == std::string::npos ? "" : key.substr(slash + 1);
    const auto it = by_name.find(name);
    if ((field != "q" && field != "error") || it == by_name.end()) {
      throw std::invalid_argument(
          fmt::format("checkpoint: strategy/data_parallel/powersgd/{} is not a compressed matrix of this run "
                      "(another model "
                      "or powersgd_min_compression?); resume with the settings it was saved with",
                      key));
    }
    auto& m = *it->second;
    if (field == "q") {
      // A Q of another rank (powersgd_rank changed) is only a warm start: drawn afresh instead.
      if (value.sizes() == torch::IntArrayRef{m.cols, m.rank})
        m.q = value.to(params_[m.slot].param.options()).clone();
      continue;
    }
    if (!options_.error_feedback) continue;  // nothing to feed back into
    if (value.sizes() != m.error.sizes()) {
      throw std::invalid_argument(
          fmt::format("checkpoint: strategy/data_parallel/powersgd/{} has shape {}; this "
                      "run's matrix is {}",
                      key, c10::str(value.sizes()), c10::str(m.error.sizes())));
    }
    m.error.copy_(value);
  }
}

DataParallel::CompressionSummary PowerSgd::summary() const {
  DataParallel::CompressionSummary s;
  for (const auto& plan : plans_) {
    s.plain_tensors += static_cast<int>(plan.plain.size());
    s.compressed_tensors += static_cast<int>(plan.matrices.size());
    s.sent_elements += plan.first.numel() + plan.second.numel();
    s.elements += plan.plain_numel;
    for (const auto& m : plan.matrices) s.elements += m.rows * m.cols;
  }
  return s;
}

}  // namespace dtrain::parallel::detail
