// The MPI library's process-wide state, as the mpi backend needs it: initialised on first use,
// finalised once at process exit after every communicator is gone, one lock serialising MPI calls,
// and the MPI datatypes and reduction operations for torch dtypes (float16/bfloat16 via user ops).
// Internal to comm/mpi.
#pragma once

#include <c10/core/ScalarType.h>
#include <mpi.h>

#include <memory>
#include <mutex>
#include <string>

#include "dtrain/comm/ReduceOp.h"

namespace dtrain::comm::mpi {

// See Note [MPI lifetime].
class MpiRuntime {
 public:
  // The runtime, initialising MPI (MPI_THREAD_SERIALIZED) if this process has not yet; each
  // communicator holds one. Throws std::runtime_error when MPI cannot give the thread level we need.
  static std::shared_ptr<MpiRuntime> acquire();
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // Held around every MPI call: MPI_THREAD_SERIALIZED allows one thread in MPI at a time.
  std::mutex& mutex() { return mutex_; }

  // A communication that can never complete is left posted (a collective cannot be cancelled);
  // MPI_Finalize would then hang or fail, so the process skips it and mpirun reports the rank.
  void mark_unfinalizable();

  // Throws std::invalid_argument for dtypes and reductions MPI cannot carry.
  MPI_Datatype datatype(c10::ScalarType dtype) const;
  MPI_Op op(ReduceOp reduce, c10::ScalarType dtype) const;

  MpiRuntime() = default;  // acquire() only; public for std::make_shared

 private:
  std::mutex mutex_;
  MPI_Op half_ops_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, max, min
  MPI_Op bfloat16_ops_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

// "MPI_ERR_TRUNCATE: message truncated" for an MPI error code.
std::string mpi_error_string(int code);

}  // namespace dtrain::comm::mpi
