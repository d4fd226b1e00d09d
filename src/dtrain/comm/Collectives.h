// The Communicator's operations, one row each: the name CommStats, the flight recorder and errors
// print, what the facade checks before a call reaches a backend, how parallel.debug: detail and the
// flight recorder describe it, and what the plain algorithm makes a rank send. The facade
// (CommunicatorCollectives.cpp), the fingerprints (FlightRecorder.cpp), CommStatsRecorder and the
// backends' wire-byte models read it. See Note [One row per operation].
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace dtrain::comm {

// Note [One row per operation]
// A collective is described once, in kCollectives; adding one is a row here, the public call and
// its do_ virtual in Communicator.h (the call checks its tensors with the row: check_call in
// CommunicatorCollectives.cpp), and one function per backend (c10d/C10dCommunicator.cpp for gloo
// and nccl, mpi/MpiCommunicator.cpp), whose wire-byte model answers for the new CommOp where the
// backend's algorithm is not the row's plain one. The conformance suite
// (tests/comm/CommunicatorConformance*.cpp) then runs it on every backend. The row's order is the
// CommOp's value, which the fingerprint's wire form sends (encode in FlightRecorder.cpp).
enum class CommOp : std::uint8_t {
  Allreduce,
  Allgather,
  Broadcast,
  ReduceScatter,
  Alltoall,
  Send,
  Recv,
  Barrier,
  Split
};

// How an operation's tensors must agree on this rank; the facade throws a CommError naming the
// rank and the operation otherwise. Every tensor is dense and contiguous; two tensors have the
// same type and device and do not overlap.
enum class TensorShape : std::uint8_t {
  None,         // barrier, split
  InPlace,      // one tensor, the same size on every rank: allreduce, broadcast, send, recv
  GatherInto,   // output = world size x input: allgather
  ScatterFrom,  // input = world size x output: reduce_scatter
  EqualChunks,  // input and output alike, divisible by the world size: alltoall
};

// What the plain algorithm (a ring, or direct messages) makes one rank send (Note [Wire bytes] in
// WireBytes.h): the model of a backend that runs it, and the default of the others, which answer
// for the operations where their algorithm differs (plain_wire_bytes).
enum class WireForm : std::uint8_t {
  Nothing,              // recv, barrier (zero-byte messages), split
  Payload,              // send: the tensor once
  PayloadToEveryOther,  // allgather: (n-1) x the input
  ChunkToEveryOther,    // reduce_scatter, alltoall: (n-1) x input / n
  RingAllreduce,        // a reduce-scatter and an all-gather round the ring: 2 (n-1) / n x the tensor
  RingBroadcast,        // pipelined from the root: every rank but the root's predecessor sends the tensor
};

struct CollectiveInfo {
  CommOp op;
  // CommStats' key, and the name in errors, the flight recorder and parallel.debug: detail.
  const char* name;
  // Numbered on its communicator and compared between ranks under parallel.debug: detail (Note
  // [Collective checks] in Communicator.cpp); send and recv are not collectives.
  bool collective;
  bool reduces;  // takes a ReduceOp, which its fingerprint carries
  // The rank argument as a check's error names it ("root 4 is outside [0, 2)"), or nullptr.
  const char* peer;
  // The same argument in a fingerprint's description ("root 0", "to 1"), or nullptr.
  const char* peer_label;
  TensorShape tensors;
  WireForm wire;
};

// op, name, collective, reduces, peer, peer_label, tensors, wire
inline constexpr std::array<CollectiveInfo, 9> kCollectives{{
    {CommOp::Allreduce, "allreduce", true, true, nullptr, nullptr, TensorShape::InPlace,
     WireForm::RingAllreduce},
    {CommOp::Allgather, "allgather", true, false, nullptr, nullptr, TensorShape::GatherInto,
     WireForm::PayloadToEveryOther},
    {CommOp::Broadcast, "broadcast", true, false, "root", "root", TensorShape::InPlace,
     WireForm::RingBroadcast},
    {CommOp::ReduceScatter, "reduce_scatter", true, true, nullptr, nullptr, TensorShape::ScatterFrom,
     WireForm::ChunkToEveryOther},
    {CommOp::Alltoall, "alltoall", true, false, nullptr, nullptr, TensorShape::EqualChunks,
     WireForm::ChunkToEveryOther},
    {CommOp::Send, "send", false, false, "destination", "to", TensorShape::InPlace, WireForm::Payload},
    {CommOp::Recv, "recv", false, false, "source", "from", TensorShape::InPlace, WireForm::Nothing},
    {CommOp::Barrier, "barrier", true, false, nullptr, nullptr, TensorShape::None, WireForm::Nothing},
    {CommOp::Split, "split", true, false, "rank", nullptr, TensorShape::None, WireForm::Nothing},
}};

constexpr const CollectiveInfo& collective_info(CommOp op) {
  return kCollectives[static_cast<std::size_t>(op)];
}

constexpr bool rows_in_op_order() {
  for (std::size_t i = 0; i < kCollectives.size(); ++i) {
    if (static_cast<std::size_t>(kCollectives[i].op) != i) return false;
  }
  return true;
}
static_assert(rows_in_op_order(), "kCollectives: row i describes CommOp i");

// The row named `name` ("allreduce"), or nullptr.
const CollectiveInfo* find_collective(const char* name);

}  // namespace dtrain::comm
