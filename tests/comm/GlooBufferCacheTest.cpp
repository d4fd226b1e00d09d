// The gloo backend's cached buffers (Note [Cached Gloo buffers]): the cache itself on a one-rank
// Gloo context, then reduce_scatter and allgather over real sockets with the tensors a cache keyed
// wrongly would confuse: two live tensors of one size, a tensor freed and another allocated in its
// place, two calls in flight on one input.
#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <memory>
#include <type_traits>
#include <vector>

#include "dtrain/comm/gloo/GlooCollectives.h"
#include "support/ThreadWorld.h"

namespace dtrain::comm {
namespace {

// Gloo's connectFullMesh takes the store by reference (Debian bookworm's Gloo, LibTorch 1.13's)
// or by shared_ptr (Gloo of 2025, as in LibTorch 2.x).
template <typename Context>
void connect_full_mesh(Context& context, const std::shared_ptr<::gloo::rendezvous::Store>& store,
                       std::shared_ptr<::gloo::transport::Device>& device) {
  if constexpr (std::is_invocable_v<decltype(&Context::connectFullMesh), Context&,
                                    std::shared_ptr<::gloo::rendezvous::Store>,
                                    std::shared_ptr<::gloo::transport::Device>&>) {
    context.connectFullMesh(store, device);
  } else {
    context.connectFullMesh(*store, device);
  }
}

std::shared_ptr<::gloo::rendezvous::Context> one_rank_context() {
  auto context = std::make_shared<::gloo::rendezvous::Context>(0, 1);
  auto device = ::c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  // c10d's in-memory store behind Gloo's store interface (LibTorch exports both; Gloo's own
  // HashStore is not part of every LibTorch).
  auto store =
      std::make_shared<::c10d::ProcessGroupGloo::GlooStore>(c10::make_intrusive<::c10d::HashStore>());
  connect_full_mesh(*context, store, device);
  return context;
}

TEST(GlooBufferCache, ServesARepeatedCallFromTheCacheAndLendsEachBufferOnce) {
  auto context = one_rank_context();
  BufferCache cache;
  std::vector<char> memory(4096);
  auto first = cache.take(*context, memory.data(), 1024);
  EXPECT_EQ(cache.created(), 1u);
  // Lent out: the same range asked for again while the first call holds it gets a buffer of its own.
  auto second = cache.take(*context, memory.data(), 1024);
  EXPECT_EQ(cache.created(), 2u);
  EXPECT_NE(first.get(), second.get());
  cache.give_back(*context, std::move(first));
  cache.give_back(*context, std::move(second));
  // Given back: the next call of that range creates nothing.
  auto again = cache.take(*context, memory.data(), 1024);
  EXPECT_EQ(cache.created(), 2u);
  EXPECT_EQ(again->ptr, memory.data());
  EXPECT_EQ(again->size, 1024u);
  cache.give_back(*context, std::move(again));
  // Another size or another address is another buffer.
  auto other_size = cache.take(*context, memory.data(), 2048);
  auto other_address = cache.take(*context, memory.data() + 1024, 1024);
  EXPECT_EQ(cache.created(), 4u);
  EXPECT_EQ(other_size->size, 2048u);
  EXPECT_EQ(other_address->ptr, memory.data() + 1024);
}

TEST(GlooBufferCache, KeepsAtMostItsBoundAndDropsTheOldestFirst) {
  auto context = one_rank_context();
  BufferCache cache;
  const std::size_t n = BufferCache::kCachedBuffers + 1;
  std::vector<char> memory(n);
  for (std::size_t i = 0; i < n; ++i) cache.give_back(*context, cache.take(*context, memory.data() + i, 1));
  ASSERT_EQ(cache.created(), n);
  // The newest is still there, the oldest was dropped to make room for it.
  cache.give_back(*context, cache.take(*context, memory.data() + n - 1, 1));
  EXPECT_EQ(cache.created(), n);
  cache.give_back(*context, cache.take(*context, memory.data(), 1));
  EXPECT_EQ(cache.created(), n + 1);

  // Scratch: the same dtype and size comes back; another dtype does not.
  at::Tensor scratch = cache.take_scratch(at::empty({1}, at::kFloat), 100);
  void* address = scratch.data_ptr();
  cache.give_back_scratch(scratch);
  scratch = at::Tensor();
  EXPECT_EQ(cache.take_scratch(at::empty({1}, at::kFloat), 100).data_ptr(), address);
  EXPECT_EQ(cache.take_scratch(at::empty({1}, at::kDouble), 100).scalar_type(), at::kDouble);
}

// Rank r's input of reduce_scatter number `call`: chunk c holds (r + 1) * (call + 1) + c.
at::Tensor rank_input(int r, int n, std::int64_t chunk, int call) {
  return (at::arange(n, at::kFloat).repeat_interleave(chunk) + (r + 1) * (call + 1)).contiguous();
}

// Chunk r of the sum over ranks.
at::Tensor expected_chunk(int r, int n, std::int64_t chunk, int call) {
  return at::full({chunk}, static_cast<float>(n * r + (call + 1) * n * (n + 1) / 2), at::kFloat);
}

TEST(GlooCommunicator, ReduceScatterFollowsTheTensorsThroughItsCachedBuffers) {
  for (int n : {2, 3}) {
    dtrain::testing::run_world(n, [&](const CommunicatorPtr& comm) {
      const int r = comm->rank();
      const std::int64_t chunk = 1000;
      // Two live inputs of one size, alternated: a cache keyed by size alone reads the wrong one.
      at::Tensor a = rank_input(r, n, chunk, 0);
      at::Tensor b = rank_input(r, n, chunk, 1);
      for (int i = 0; i < 4; ++i) {
        const bool use_a = i % 2 == 0;
        at::Tensor out = at::empty({chunk});
        comm->reduce_scatter(use_a ? a : b, out, ReduceOp::Sum, /*async_op=*/i >= 2)->wait();
        EXPECT_TRUE(at::equal(out, expected_chunk(r, n, chunk, use_a ? 0 : 1)))
            << "rank " << r << " call " << i;
      }
      // Each input freed before the next is made: the allocator usually hands out the same address,
      // and the cached buffer over it must read the new contents.
      for (int call = 2; call < 6; ++call) {
        at::Tensor input = rank_input(r, n, chunk, call);
        at::Tensor out = at::empty({chunk});
        comm->reduce_scatter(input, out)->wait();
        EXPECT_TRUE(at::equal(out, expected_chunk(r, n, chunk, call))) << "rank " << r << " call " << call;
      }
      // Two calls in flight on one input (c10d's two worker threads may run them at once), into
      // different outputs.
      at::Tensor first = at::empty({chunk});
      at::Tensor second = at::empty({chunk});
      auto w1 = comm->reduce_scatter(a, first, ReduceOp::Sum, true);
      auto w2 = comm->reduce_scatter(a, second, ReduceOp::Max, true);
      w1->wait();
      w2->wait();
      EXPECT_TRUE(at::equal(first, expected_chunk(r, n, chunk, 0))) << "rank " << r;
      EXPECT_TRUE(at::equal(second, at::full({chunk}, static_cast<float>(r + n), at::kFloat)))
          << "rank " << r;
    });
  }
}

TEST(GlooCommunicator, AllgatherFollowsTheTensorsThroughItsCachedBuffers) {
  for (int n : {2, 3}) {
    dtrain::testing::run_world(n, [&](const CommunicatorPtr& comm) {
      const int r = comm->rank();
      const std::int64_t chunk = 777;
      for (int call = 0; call < 4; ++call) {
        at::Tensor input = at::full({chunk}, static_cast<float>(10 * call + r));
        at::Tensor output = at::empty({n * chunk});
        comm->allgather(input, output, /*async_op=*/call % 2 == 1)->wait();
        at::Tensor expected = (at::arange(n, at::kFloat) + 10 * call).repeat_interleave(chunk);
        EXPECT_TRUE(at::equal(output, expected)) << "rank " << r << " call " << call;
      }
    });
  }
}

}  // namespace
}  // namespace dtrain::comm
