// The table of the Communicator's operations (comm/Collectives.h): one row each, found by its name,
// and the plain algorithms' wire bytes against their closed forms.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "dtrain/comm/Collectives.h"
#include "dtrain/comm/FlightRecorder.h"
#include "dtrain/comm/WireBytes.h"

namespace dtrain::comm {
namespace {

WireCall call_of(CommOp op, std::int64_t numel, int root = 0) {
  WireCall call;
  call.op = op;
  call.numel = numel;
  call.element_size = 4;
  call.root = root;
  return call;
}

TEST(Collectives, EveryRowHasANameOfItsOwnAndIsFoundByIt) {
  std::set<std::string> names;
  for (const auto& row : kCollectives) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    // By another literal of the same text, as a fingerprint decoded elsewhere carries it.
    const std::string copy = row.name;
    ASSERT_NE(find_collective(copy.c_str()), nullptr) << row.name;
    EXPECT_EQ(find_collective(copy.c_str())->op, row.op);
  }
  EXPECT_EQ(find_collective("gather"), nullptr);
}

TEST(Collectives, SendAndRecvAreNotNumberedAndNameTheirPeer) {
  for (CommOp op : {CommOp::Send, CommOp::Recv}) {
    EXPECT_FALSE(collective_info(op).collective);
    EXPECT_NE(collective_info(op).peer, nullptr);
  }
  EXPECT_STREQ(collective_info(CommOp::Broadcast).peer, "root");
  EXPECT_TRUE(collective_info(CommOp::ReduceScatter).reduces);
  EXPECT_FALSE(collective_info(CommOp::Alltoall).reduces);
}

TEST(Collectives, FingerprintsDescribeTheirPeerInTheRowsWords) {
  CallFingerprint send;
  send.op = "send";
  send.dtype = c10::ScalarType::Float;
  send.numel = 10;
  send.root = 1;
  EXPECT_EQ(describe(send), "send(float32, 10, to 1)");
  send.op = "recv";
  EXPECT_EQ(describe(send), "recv(float32, 10, from 1)");
}

// 4 ranks, 1024 floats (4096 bytes).
TEST(Collectives, PlainWireBytesAreTheRingsAndDirectMessagesClosedForms) {
  const int n = 4;
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Allreduce, 1024), 0, n), 2u * 3 * 4096 / 4);
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Allgather, 1024), 2, n), 3u * 4096);
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::ReduceScatter, 1024), 1, n), 3u * 1024);
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Alltoall, 1024), 3, n), 3u * 1024);
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Send, 1024), 0, n), 4096u);
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Recv, 1024), 0, n), 0u);
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Barrier, 0), 0, n), 0u);
  // The pipelined ring from root 2: rank 1, the root's predecessor, only receives.
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Broadcast, 1024, 2), 1, n), 0u);
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Broadcast, 1024, 2), 2, n), 4096u);
  EXPECT_EQ(plain_wire_bytes(call_of(CommOp::Broadcast, 1024, 2), 3, n), 4096u);
}

}  // namespace
}  // namespace dtrain::comm
