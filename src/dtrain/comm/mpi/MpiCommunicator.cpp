// The mpi backend: every asynchronous collective is a non-blocking MPI call (or a polled step list,
// for the all-reduce) started in submission order and polled to completion against the
// communicator's timeout by the progress engine (MpiProgressEngine.h). A blocking all-reduce,
// allgather or reduce_scatter is MPI's blocking call under a watchdog (Note
// [Blocking collectives and the watchdog]); send and recv are posted and tested on the caller's
// thread.
#include "dtrain/comm/mpi/MpiCommunicator.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <mpi.h>

#include <functional>
#include <mutex>
#include <stdexcept>

#include "dtrain/comm/mpi/MpiOperation.h"
#include "dtrain/comm/mpi/MpiProgressEngine.h"
#include "dtrain/comm/mpi/MpiRuntime.h"
#include "dtrain/comm/mpi/MpiWatchdog.h"
#include "dtrain/comm/mpi/MpiWireBytes.h"

namespace dtrain::comm {
namespace {

using mpi::AllreduceOperation;
using mpi::check_mpi;
using mpi::checked_count;
using mpi::MpiRuntime;
using mpi::Operation;
using mpi::ProgressEngine;
using mpi::RequestOperation;
using mpi::TransferOperation;
using mpi::Watchdog;

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (used for collectives) and duplicates it for point-to-point traffic,
  // so that user tags never meet the all-reduce's internal messages.
  MpiCommunicator(std::shared_ptr<MpiRuntime> runtime, MPI_Comm comm, int rank, int size,
                  std::chrono::milliseconds timeout, std::chrono::microseconds poll_wait)
      : Communicator(rank, size, timeout),
        runtime_(runtime),
        collective_comm_(comm),
        poll_wait_(poll_wait),
        engine_(std::make_shared<ProgressEngine>(runtime, timeout, poll_wait)),
        watchdog_(rank, size, timeout, &flight_recorder()) {
    std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
    MPI_Comm_set_errhandler(collective_comm_, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_dup(collective_comm_, &p2p_comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(p2p_comm_, MPI_ERRORS_RETURN);
    int flag = 0;
    int* tag_ub = nullptr;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    tag_ub_ = flag && tag_ub ? *tag_ub : 32767;
  }

  ~MpiCommunicator() override {
    engine_->shutdown();
    if (engine_->broken()) return;  // operations are still posted on these communicators
    std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
    MPI_Comm_free(&p2p_comm_);
    MPI_Comm_free(&collective_comm_);
  }

  std::string backend() const override { return "mpi"; }

 protected:
  WorkPtr do_allreduce(const at::Tensor& tensor, ReduceOp op, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(tensor.scalar_type());
    const MPI_Op mpi_op = runtime_->op(op, tensor.scalar_type());
    const int count = checked_count(tensor);
    if (!async_op) {
      blocking("allreduce", tensor, "MPI_Allreduce", [&] {
        return MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), count, datatype, mpi_op, collective_comm_);
      });
      if (op == ReduceOp::Avg) tensor.div_(size());
      return WorkPtr();  // finished (Communicator.h allows an empty handle here)
    }
    auto operation =
        std::make_unique<AllreduceOperation>(tensor, datatype, mpi_op, rank(), size(), collective_comm_);
    if (op == ReduceOp::Avg) operation->on_done = divide_by_size(tensor);
    return submit(std::move(operation), async_op);
  }

  WorkPtr do_allgather(const at::Tensor& input, const at::Tensor& output, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(input.scalar_type());
    const int count = checked_count(input);
    checked_count(output);
    if (!async_op) {
      blocking("allgather", output, "MPI_Allgather", [&] {
        return MPI_Allgather(input.data_ptr(), count, datatype, output.data_ptr(), count, datatype,
                             collective_comm_);
      });
      return WorkPtr();  // finished (Communicator.h allows an empty handle here)
    }
    return submit(std::make_unique<RequestOperation>("MPI_Iallgather",
                                                     [=, comm = collective_comm_](MPI_Request* request) {
                                                       return MPI_Iallgather(input.data_ptr(), count,
                                                                             datatype, output.data_ptr(),
                                                                             count, datatype, comm, request);
                                                     }),
                  async_op);
  }

  WorkPtr do_broadcast(const at::Tensor& tensor, int root, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(tensor.scalar_type());
    const int count = checked_count(tensor);
    return submit(std::make_unique<RequestOperation>("MPI_Ibcast",
                                                     [=, comm = collective_comm_](MPI_Request* request) {
                                                       return MPI_Ibcast(tensor.data_ptr(), count, datatype,
                                                                         root, comm, request);
                                                     }),
                  async_op);
  }

  WorkPtr do_reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                            bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(input.scalar_type());
    const MPI_Op mpi_op = runtime_->op(op, input.scalar_type());
    checked_count(input);
    const int count = checked_count(output);
    if (!async_op) {
      // See Note [Blocking collectives and the watchdog]; its bytes, Note [OpenMPI's algorithms].
      blocking("reduce_scatter", input, "MPI_Reduce_scatter_block", [&] {
        return MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), count, datatype, mpi_op,
                                        collective_comm_);
      });
      if (op == ReduceOp::Avg) output.div_(size());
      return WorkPtr();  // finished (Communicator.h allows an empty handle here)
    }
    auto operation = std::make_unique<RequestOperation>(
        "MPI_Ireduce_scatter_block", [=, comm = collective_comm_](MPI_Request* request) {
          return MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), count, datatype, mpi_op, comm,
                                           request);
        });
    if (op == ReduceOp::Avg) operation->on_done = divide_by_size(output);
    return submit(std::move(operation), async_op);
  }

  WorkPtr do_alltoall(const at::Tensor& input, const at::Tensor& output, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(input.scalar_type());
    const int chunk = checked_count(input) / size();
    return submit(std::make_unique<RequestOperation>("MPI_Ialltoall",
                                                     [=, comm = collective_comm_](MPI_Request* request) {
                                                       return MPI_Ialltoall(input.data_ptr(), chunk, datatype,
                                                                            output.data_ptr(), chunk,
                                                                            datatype, comm, request);
                                                     }),
                  async_op);
  }

  WorkPtr do_send(const at::Tensor& tensor, int dst, int tag, bool async_op) override {
    return transfer(TransferOperation::Direction::Send, tensor, dst, tag, async_op);
  }

  WorkPtr do_recv(const at::Tensor& tensor, int src, int tag, bool async_op) override {
    return transfer(TransferOperation::Direction::Receive, tensor, src, tag, async_op);
  }

  WorkPtr do_barrier(bool async_op) override {
    return submit(std::make_unique<RequestOperation>("MPI_Ibarrier",
                                                     [comm = collective_comm_](MPI_Request* request) {
                                                       return MPI_Ibarrier(comm, request);
                                                     }),
                  async_op);
  }

  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override {
    // MPI_Comm_split blocks without a timeout; a barrier first, ordered after this rank's queued
    // work, fails within the timeout when a peer is absent.
    do_barrier(false)->wait();
    int position = -1;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == rank()) position = static_cast<int>(i);
    }
    MPI_Comm sub = MPI_COMM_NULL;
    {
      std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
      check_mpi(MPI_Comm_split(collective_comm_, position >= 0 ? 0 : MPI_UNDEFINED, position, &sub),
                "MPI_Comm_split");
    }
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(runtime_, sub, position, static_cast<int>(ranks.size()),
                                             timeout(), poll_wait_);
  }

  // See Note [OpenMPI's algorithms].
  std::uint64_t wire_bytes(const WireCall& call) const override {
    return mpi::mpi_wire_bytes(call, rank(), size());
  }

 private:
  WorkPtr submit(std::unique_ptr<Operation> operation, bool async_op) {
    return engine_->submit(std::move(operation), async_op);
  }

  // A blocking collective: `call` (a blocking MPI function) on the caller's thread under the
  // watchdog, once every operation queued before it has been posted and every stepped one has
  // finished. See Note [Blocking collectives and the watchdog].
  template <typename Call>
  void blocking(const char* op, const at::Tensor& tensor, const char* name, Call&& call) {
    engine_->drain_queued();
    engine_->drain_stepped();
    if (engine_->broken()) {
      throw std::runtime_error(
          "the communicator is unusable after an earlier failure; the process should exit");
    }
    int rc = MPI_SUCCESS;
    {
      std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
      watchdog_.arm(op, static_cast<std::int64_t>(tensor.nbytes()));
      rc = call();
      watchdog_.disarm();
    }
    check_mpi(rc, name);
  }

  // A send or recv, posted and tested on the caller's thread (Note [Point-to-point on the caller's
  // thread]); a blocking one waits for itself here.
  WorkPtr transfer(TransferOperation::Direction direction, const at::Tensor& tensor, int peer, int tag,
                   bool async_op) {
    check_tag(tag);
    WorkPtr work = engine_->post_transfer(direction, tensor, checked_count(tensor),
                                          runtime_->datatype(tensor.scalar_type()), peer, tag, p2p_comm_);
    if (async_op) return work;
    work->wait();
    return completed_work();
  }

  std::function<void()> divide_by_size(at::Tensor tensor) const {
    return [tensor, n = size()]() mutable { tensor.div_(n); };
  }

  void check_tag(int tag) const {
    if (tag < 0 || tag > tag_ub_) {
      throw std::invalid_argument(fmt::format("tag {} is outside MPI's range [0, {}]", tag, tag_ub_));
    }
  }

  std::shared_ptr<MpiRuntime> runtime_;
  MPI_Comm collective_comm_;
  std::chrono::microseconds poll_wait_;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;
  int tag_ub_ = 32767;
  std::shared_ptr<ProgressEngine> engine_;
  Watchdog watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> connect_mpi(const BackendOptions& options, const RendezvousInfo& rendezvous) {
  auto runtime = MpiRuntime::acquire();
  int rank = 0;
  int size = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> mpi_lock(runtime->mutex());
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    // A rendezvous resolved from somewhere (options, torchrun, Slurm) must describe the same job
    // that mpirun started; the default one carries no claim.
    if (rendezvous.source != "default" && (rendezvous.world_size != size || rendezvous.rank != rank)) {
      throw std::invalid_argument(fmt::format(
          "the mpi backend found rank {} of world size {} in MPI_COMM_WORLD, but the rendezvous ({}) says "
          "rank {} "
          "of world size {}; start the job with `mpirun -n {}` or make the rank/world-size options and "
          "environment agree with mpirun",
          rank, size, rendezvous.source, rendezvous.rank, rendezvous.world_size, rendezvous.world_size));
    }
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  }
  return std::make_unique<MpiCommunicator>(runtime, comm, rank, size, options.timeout, options.poll_wait);
}

}  // namespace dtrain::comm
