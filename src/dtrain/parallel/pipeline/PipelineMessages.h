// The pipeline's wire protocol: the tags its messages travel under, the header that tells a
// receiver what arrives, asynchronous sends kept alive until they complete, receives posted ahead
// of need, and a stage's optimizer state packed into bytes for rank 0's checkpoint. Used by the
// strategy's step, evaluation and checkpoint; see Note [Pipeline messages].
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"

namespace dtrain::parallel::pipeline {

// Note [Pipeline messages]
// Every transfer is a tagged send/recv inside the pipeline's communicator (ranked by stage), so
// messages of different kinds and micro-batches never match each other. Sends are asynchronous
// (the tensor is kept until the step waits for all of them) and receives block: with the
// schedules of Note [Pipeline schedules] no rank then waits for a send that waits for it. A
// receiver must know what it receives:
//   - the step's batch: every rank's batch size is all-gathered over the world first (one
//     integer per rank), so stage 0 knows the rows of the inputs each stage sends it and the last
//     stage those of the targets (their trailing shape and dtype are its own batch's), and every
//     rank knows the pipeline's micro-batch rows and the global batch the loss is divided by;
//   - activations: the first micro-batch of a step carries a small header (dtype and shape);
//     later micro-batches of the step have the same trailing shape and their own rows;
//   - gradients: the shape and dtype of the activation the stage sent, so no header at all.
// PyTorch's torch.distributed.pipelining infers shapes once at stage construction with meta
// tensors, and DeepSpeed's engine sends the tensor meta once on the first step and then assumes
// fixed shapes; the per-step header costs one 96-byte message per link and lets micro-batches of
// uneven rows (a batch M does not divide) and batches of any size (an epoch's last) through.
// Evaluation sends a header with every message, since its batches are few and of any size.

// Note [Receives posted ahead]
// A stage posts the receive of its next forward's activation and of its next backward's gradient
// as soon as their shapes are known (after the receive before them, or after the forward whose
// output the gradient is for), not when it reaches them. On Gloo a send moves no byte until the
// receiver has posted its receive: Gloo's TCP pair answers a send with "recv ready" from the
// receiver, and the data then leaves from the sender's device thread, which on a core busy with
// the sender's next micro-batch waits for the scheduler. Posted ahead, the "recv ready" is already
// there when the send is posted, and the sender's own thread writes the data at once. MPI's
// eager and rendezvous protocols gain the same way (a receive already posted is matched on
// arrival). The cost is memory: a buffer of the next micro-batch's activation exists while the
// schedule's own are held, so 1F1B holds S - s activations and one incoming on stages after the
// first (at most S), and one gradient buffer arrives an action early. The order of every message
// is unchanged, so the results are bit for bit those of receiving when reached.
// The gain is in idle time where a core is free to move the bytes (more cores than stages, GPUs):
// gpipe S = 2, M = 8 over Gloo on two cores idled 1.35x of (S-1)/(M+S-1) instead of 1.55x, at the
// same samples/s, since Gloo's device thread there takes its core from the receiver's computation.

// Note [Transfers kept moving between layers]
// Over mpi, a message above the eager limit moves in steps its sender takes only inside MPI calls
// (reading the receiver's acknowledgement, scheduling fragments), and within a host without Open
// MPI's single-copy mechanism (CMA: ptrace rules and containers turn it off, and CI runs without
// it) each fragment is pushed through shared memory by the sender and copied out by the receiver,
// each inside its own MPI calls. A stage that posts its activation's send and then computes the
// next micro-batch would hold the next stage back for that whole computation: gpipe S = 2, M = 8
// over mpi without single-copy idles 0.45-0.56 of the step that way (0.10-0.29 with it). So while
// a step runs, the stage polls its outstanding sends and posted receives after each layer's
// forward and, through a hook on each layer's output, after each layer's backward: Work::poll(),
// one test that blocks on nothing; the first unfinished one stops the round, since one MPI call
// advances every request of the process. On gloo, whose send and recv are moved by Gloo's own
// threads, poll() answers false at once and costs a virtual call. Where the transfers finished,
// nothing is called. A layer's forward or backward is the grain: one long layer still delays its
// stage's messages by its own length. How much one call moves is Open MPI's send pipeline depth,
// which dtrain raises (Note [Open MPI's send pipeline depth] in comm/mpi/MpiRuntime.cpp).
// A progress thread that enters MPI on a timer while transfers are open is not used: its 1 ms
// wake-ups cost 10-15% of a 16 MB sendrecv on a two-core host. A failed poll is left to the wait
// that follows, which reports it.

namespace wire {

constexpr int kTagInputs = 1;
constexpr int kTagTargets = 2;
constexpr int kTagHeader = 3;
constexpr int kTagEvalControl = 4;
constexpr int kTagEvalHeader = 5;
constexpr int kTagEvalData = 6;
constexpr int kTagSaveLength = 7;
constexpr int kTagSaveBytes = 8;
constexpr int kMaxMicroBatches = (1 << 20) - 1;
constexpr int kTagActivation = 1 << 20;  // + micro-batch
constexpr int kTagGradient = 2 << 20;    // + micro-batch

constexpr std::int64_t kHeaderLength = 12;  // kind, dtype, ndim, up to 9 dimensions
constexpr std::int64_t kMaxDims = kHeaderLength - 3;
enum HeaderKind : std::int64_t { kData = 1, kStop = 2 };

struct Header {
  std::int64_t kind = 0;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<std::int64_t> shape;
};

// A header of `kind` describing `tensor` (its dtype and shape); throws std::invalid_argument for
// a tensor of more than kMaxDims dimensions.
torch::Tensor make_header(HeaderKind kind, const torch::Tensor& tensor = {});
Header parse_header(const torch::Tensor& header);

// Asynchronous sends of one step, each tensor kept alive until its send completes.
class Sends {
 public:
  explicit Sends(comm::Communicator* comm) : comm_(comm) {}
  void post(torch::Tensor tensor, int dst, int tag);
  // Returns the seconds spent waiting.
  double wait_all();
  // Tests the sends in posting order up to the first unfinished one (Note [Transfers kept moving
  // between layers]); true when one was unfinished.
  bool poll();

 private:
  comm::Communicator* comm_;
  std::vector<comm::WorkPtr> works_;
  std::vector<torch::Tensor> tensors_;
  std::size_t finished_ = 0;  // works_[0, finished_) are known to be done
};

// Into a tensor on `device`: the model's for data, the CPU for headers and lengths. Adds the
// seconds waited to *seconds when given.
torch::Tensor receive(comm::Communicator& comm, std::vector<std::int64_t> shape, torch::ScalarType dtype,
                      int src, int tag, double* seconds, torch::Device device = torch::kCPU);
Header receive_header(comm::Communicator& comm, int src, int tag, double* seconds);

// Receives of one step posted before they are needed (Note [Receives posted ahead]), by tag.
class Receives {
 public:
  // Activations and gradients land on `device`, the model's.
  Receives(comm::Communicator* comm, torch::Device device) : comm_(comm), device_(device) {}
  Receives(const Receives&) = delete;
  Receives& operator=(const Receives&) = delete;
  // A step that fails (a loss of the wrong shape, a peer gone) between posting a receive and
  // taking it leaves the receive posted, and the backend may still write into its tensor: the
  // tensor and its Work are kept, reachable, for the rest of the process, which ends with the
  // step's error.
  ~Receives();
  bool posted(int tag) const { return posted_.count(tag) > 0; }
  void post(const std::vector<std::int64_t>& shape, torch::ScalarType dtype, int src, int tag);
  // The receive posted for `tag` (posted now if it was not), once it has arrived.
  torch::Tensor take(const std::vector<std::int64_t>& shape, torch::ScalarType dtype, int src, int tag,
                     double* seconds);
  // Tests the posted receives up to the first unfinished one (Note [Transfers kept moving between
  // layers]).
  void poll();

 private:
  struct Posted {
    torch::Tensor tensor;
    comm::WorkPtr work;
    bool arrived = false;  // poll() found it finished
  };
  comm::Communicator* comm_;
  torch::Device device_;
  std::map<int, Posted> posted_;
};

inline std::vector<std::int64_t> with_rows(std::vector<std::int64_t> shape, std::int64_t rows) {
  shape.at(0) = rows;
  return shape;
}

inline std::vector<std::int64_t> shape_of(const torch::Tensor& t) {
  return t.sizes().vec();
}

// A named set of tensors as bytes (and back): how a stage's optimizer state travels to rank 0.
torch::Tensor pack(const std::map<std::string, torch::Tensor>& named);
std::map<std::string, torch::Tensor> unpack(const torch::Tensor& bytes);

}  // namespace wire

}  // namespace dtrain::parallel::pipeline
