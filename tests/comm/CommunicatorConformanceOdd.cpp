// The Communicator contract, part 4: what sharded and pipelined training lean on. reduce_scatter,
// the flat allgather and tagged send/recv at sizes that divide nothing evenly (1, 7, 1001, 65537
// elements), in the dtypes those strategies use, blocking and asynchronous, and many tagged
// transfers in flight at once, received and waited in another order than they were sent. Every
// result is checked against a reference this rank computes from what every rank contributed.
// See CommunicatorConformance.h.
#include <algorithm>
#include <memory>
#include <vector>

#include "comm/CommunicatorConformance.h"

namespace dtrain::testing {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using comm::WorkPtr;

const std::int64_t kOddSizes[] = {1, 7, 1001, 65537};

// Rank r's tensor of `numel` elements: values whose sums over four ranks are exact in every dtype
// here, in any order of addition (so a ring's order and the reference's agree bit for bit):
// integers below 16 for the 16-bit floats, eighths for float32 and float64, and large integers
// for int64 (beyond float64's 2^53, so a detour through double would show).
at::Tensor odd_values(int rank, std::int64_t numel, at::ScalarType dtype) {
  const at::Tensor i = at::arange(numel, at::kLong);
  switch (dtype) {
    case at::kLong:
      return i * 7919 + (std::int64_t{1} << 55) + rank * 1000003;
    case at::kHalf:
    case at::kBFloat16:
      return ((i * 5 + rank * 3) % 16).to(dtype);
    default:
      return ((i * 13 + rank * 5) % 4096).to(at::kDouble).div(8).to(dtype);
  }
}

// The dtypes of this part that the backend reduces.
std::vector<at::ScalarType> odd_reduced(const std::vector<at::ScalarType>& reduced) {
  std::vector<at::ScalarType> dtypes;
  for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong}) {
    if (std::find(reduced.begin(), reduced.end(), dtype) != reduced.end()) dtypes.push_back(dtype);
  }
  return dtypes;
}

std::string where(const Communicator& comm, at::ScalarType dtype, std::int64_t numel, bool async_op) {
  return "rank " + std::to_string(comm.rank()) + " " + c10::toString(dtype) + " numel " +
         std::to_string(numel) + (async_op ? " async" : " blocking");
}

TEST_P(CommunicatorConformance, ReduceScatterOddSizesAndDtypesMatchALocalReference) {
  const int n = this->n();
  const auto dtypes = odd_reduced(GetParam().reduced_dtypes);
  world([&](Communicator& comm) {
    for (auto dtype : dtypes) {
      for (const std::int64_t chunk : kOddSizes) {
        // Every rank's input, as every rank contributes it: the reference sums chunk rank() of each.
        at::Tensor expected_sum = at::zeros({chunk}, dtype);
        at::Tensor expected_max = odd_values(0, n * chunk, dtype).narrow(0, comm.rank() * chunk, chunk);
        for (int r = 0; r < n; ++r) {
          const at::Tensor theirs = odd_values(r, n * chunk, dtype).narrow(0, comm.rank() * chunk, chunk);
          expected_sum += theirs;
          expected_max = at::maximum(expected_max, theirs);
        }
        for (const bool async_op : {false, true}) {
          at::Tensor input = on_device(odd_values(comm.rank(), n * chunk, dtype));
          at::Tensor output = on_device(at::full({chunk}, 3, dtype));
          comm.reduce_scatter(input, output, ReduceOp::Sum, async_op)->wait();
          EXPECT_TRUE(same(output, expected_sum)) << where(comm, dtype, chunk, async_op) << " sum";
          // The input is the caller's: left as it was.
          EXPECT_TRUE(same(input, odd_values(comm.rank(), n * chunk, dtype)))
              << where(comm, dtype, chunk, async_op);
        }
        at::Tensor output = on_device(at::zeros({chunk}, dtype));
        comm.reduce_scatter(on_device(odd_values(comm.rank(), n * chunk, dtype)), output, ReduceOp::Max);
        EXPECT_TRUE(same(output, expected_max)) << where(comm, dtype, chunk, false) << " max";
      }
    }
  });
}

TEST_P(CommunicatorConformance, AllgatherOddSizesAndDtypesMatchALocalReference) {
  const int n = this->n();
  world([&](Communicator& comm) {
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong, at::kBool}) {
      for (const std::int64_t numel : kOddSizes) {
        std::vector<at::Tensor> parts;
        for (int r = 0; r < n; ++r) {
          parts.push_back(dtype == at::kBool ? odd_values(r, numel, at::kLong).remainder(3) == 0
                                             : odd_values(r, numel, dtype));
        }
        const at::Tensor expected = at::cat(parts);
        for (const bool async_op : {false, true}) {
          at::Tensor output = on_device(at::zeros({n * numel}, dtype));
          WorkPtr work = comm.allgather(on_device(parts[comm.rank()]), output, async_op);
          work->wait();
          EXPECT_TRUE(same(output, expected)) << where(comm, dtype, numel, async_op);
        }
      }
    }
  });
}

// Every rank sends eight messages to the next rank and eight to the previous one, of odd sizes and
// four dtypes, tags interleaved between the two directions; the receives are posted in another
// order (tags backwards, directions alternating) and waited in a third. Each message must land in
// the receive that named its tag, whatever the order.
TEST_P(CommunicatorConformance, ManyTaggedTransfersMatchByTagInAnyOrder) {
  const int n = this->n();
  if (n == 1) GTEST_SKIP() << "no peer to send to";
  constexpr int kTags = 8;
  const at::ScalarType kDtypes[] = {at::kFloat, at::kDouble, at::kBFloat16, at::kLong};
  // Message `tag` from `rank`: its size and dtype depend on the tag, its values on both.
  auto message = [&](int rank, int tag) {
    const std::int64_t numel = kOddSizes[tag % 4] + tag;
    return odd_values(rank + 10 * tag, numel, kDtypes[tag % 4]);
  };
  // Tags to the next rank are even (2t), to the previous odd (2t + 1): on two ranks both go to
  // the same peer, and only the tag tells them apart.
  world([&](Communicator& comm) {
    const int next = (comm.rank() + 1) % n;
    const int prev = (comm.rank() + n - 1) % n;
    std::vector<WorkPtr> sends;
    std::vector<WorkPtr> receives(2 * kTags);
    std::vector<at::Tensor> inboxes(2 * kTags);
    for (int t = 0; t < kTags; ++t) {
      sends.push_back(comm.send(on_device(message(comm.rank(), 2 * t)), next, 2 * t, /*async_op=*/true));
      sends.push_back(
          comm.send(on_device(message(comm.rank(), 2 * t + 1)), prev, 2 * t + 1, /*async_op=*/true));
    }
    for (int t = kTags - 1; t >= 0; --t) {
      for (const int tag : {2 * t + 1, 2 * t}) {
        // Tag 2t came from the previous rank (it sends 2t to its next), 2t + 1 from the next.
        const int from = tag % 2 == 0 ? prev : next;
        inboxes[tag] = on_device(at::zeros_like(message(from, tag)));
        receives[tag] = comm.recv(inboxes[tag], from, tag, /*async_op=*/true);
      }
    }
    // Waited: odd tags first, then even ones, then the sends.
    for (int tag = 1; tag < 2 * kTags; tag += 2) receives[tag]->wait();
    for (int tag = 0; tag < 2 * kTags; tag += 2) receives[tag]->wait();
    for (auto& send : sends) send->wait();
    for (int tag = 0; tag < 2 * kTags; ++tag) {
      const int from = tag % 2 == 0 ? prev : next;
      EXPECT_TRUE(same(inboxes[tag], message(from, tag))) << "rank " << comm.rank() << " tag " << tag;
    }
  });
}

// Sharded strategies reduce-scatter and all-gather within subgroups: the even ranks and the odd ranks
// each form one with split(), and each reduces and gathers its own members' contributions.
TEST_P(CommunicatorConformance, ReduceScatterAndAllgatherWithinSplits) {
  const int n = this->n();
  if (n < 3) GTEST_SKIP() << "needs a subgroup of two ranks or more";
  world([&](Communicator& comm) {
    std::unique_ptr<Communicator> mine;
    for (const int parity : {0, 1}) {
      std::vector<int> members;
      for (int r = parity; r < n; r += 2) members.push_back(r);
      auto sub = comm.split(members);
      if (comm.rank() % 2 == parity) mine = std::move(sub);
    }
    ASSERT_TRUE(mine);
    const int m = mine->size();
    std::vector<int> members;
    for (int r = comm.rank() % 2; r < n; r += 2) members.push_back(r);
    for (const std::int64_t chunk : {7, 1001}) {
      at::Tensor expected = at::zeros({chunk}, at::kDouble);
      for (const int global : members) {
        expected += odd_values(global, m * chunk, at::kDouble).narrow(0, mine->rank() * chunk, chunk);
      }
      at::Tensor output = on_device(at::zeros({chunk}, at::kDouble));
      mine->reduce_scatter(on_device(odd_values(comm.rank(), m * chunk, at::kDouble)), output, ReduceOp::Sum,
                           /*async_op=*/true)
          ->wait();
      EXPECT_TRUE(same(output, expected)) << "rank " << comm.rank() << " chunk " << chunk;
      std::vector<at::Tensor> parts;
      for (const int global : members) parts.push_back(odd_values(global, chunk, at::kFloat));
      at::Tensor gathered = on_device(at::zeros({m * chunk}));
      mine->allgather(on_device(odd_values(comm.rank(), chunk, at::kFloat)), gathered);
      EXPECT_TRUE(same(gathered, at::cat(parts))) << "rank " << comm.rank() << " chunk " << chunk;
    }
  });
}

// Blocking transfers in a pattern that only works if a blocking recv may name a tag sent after
// another one: each rank sends tags 5 and 9 (in that order) to the next, and receives 9 before 5.
TEST_P(CommunicatorConformance, BlockingReceivesTakeTheirTagOutOfOrder) {
  const int n = this->n();
  if (n == 1) GTEST_SKIP() << "no peer to send to";
  world([&](Communicator& comm) {
    const int next = (comm.rank() + 1) % n;
    const int prev = (comm.rank() + n - 1) % n;
    WorkPtr five =
        comm.send(on_device(odd_values(comm.rank(), 1001, at::kFloat)), next, 5, /*async_op=*/true);
    WorkPtr nine = comm.send(on_device(odd_values(comm.rank(), 7, at::kDouble)), next, 9, /*async_op=*/true);
    at::Tensor got_nine = on_device(at::zeros({7}, at::kDouble));
    at::Tensor got_five = on_device(at::zeros({1001}, at::kFloat));
    comm.recv(got_nine, prev, 9);
    comm.recv(got_five, prev, 5);
    five->wait();
    nine->wait();
    EXPECT_TRUE(same(got_nine, odd_values(prev, 7, at::kDouble))) << "rank " << comm.rank();
    EXPECT_TRUE(same(got_five, odd_values(prev, 1001, at::kFloat))) << "rank " << comm.rank();
  });
}

}  // namespace
}  // namespace dtrain::testing
