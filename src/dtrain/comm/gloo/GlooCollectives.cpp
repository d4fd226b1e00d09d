// The gloo backend's reduce_scatter (a ring over Gloo's unbound buffers) and flat allgather
// (gloo::allgather into the caller's output), on the context of c10d's process group. See Note
// [Gloo's native collectives] in GlooCollectives.h.
#include "dtrain/comm/gloo/GlooCollectives.h"

#include <ATen/ATen.h>
#include <gloo/allgather.h>
#include <gloo/config.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <torch/version.h>

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

namespace dtrain::comm {
namespace {

// A c10d Work that runs a function on the group's worker threads.
class FunctionWork final : public GlooGroup::NativeWork {
 public:
  FunctionWork(const compat::GlooWorkArgs<::gloo::Context>& args, std::function<void()> body)
      : GlooGroup::NativeWork(args), body_(std::move(body)) {}
  // The body (and the tensors it captured) is destroyed before c10d marks the work complete, so
  // a caller that drops its own reference after wait() knows the input's storage is free then,
  // not whenever the worker thread lets go of the work (zero's gradient buffers count on it).
  void run() override {
    auto body = std::move(body_);
    body_ = nullptr;
    body();
  }

 private:
  std::function<void()> body_;
};

// A Gloo slot no Gloo algorithm or c10d send/recv uses: prefix 0x5d in the top byte (Gloo's own
// prefixes are small; c10d's point-to-point slots are the user's tag), then the ring's step, then
// c10d's collective tag.
std::uint64_t ring_slot(std::uint32_t tag, int step) {
  return (std::uint64_t{0x5d} << 56) | (static_cast<std::uint64_t>(step) << 32) | tag;
}

// out = a op b, elementwise (Avg sums; the caller divides at the end).
void combine(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      at::add_out(out, a, b);
      return;
    case ReduceOp::Max:
      at::maximum_out(out, a, b);
      return;
    case ReduceOp::Min:
      at::minimum_out(out, a, b);
      return;
  }
}

// What one call borrows from its group's BufferCache: given back when the call has succeeded
// (succeeded()), dropped when it failed. See Note [Cached Gloo buffers].
class Borrowed {
 public:
  Borrowed(BufferCache& cache, ::gloo::Context& context) : cache_(cache), context_(context) {}
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  ~Borrowed() {
    // A failed call: Gloo may still hold a pending send or receive on these buffers.
    buffers_.clear();
    scratch_.clear();
  }

  ::gloo::transport::UnboundBuffer& buffer(void* ptr, std::size_t bytes) {
    buffers_.push_back(cache_.take(context_, ptr, bytes));
    return *buffers_.back();
  }
  at::Tensor scratch(const at::Tensor& like, std::int64_t numel) {
    scratch_.push_back(cache_.take_scratch(like, numel));
    return scratch_.back();
  }
  // Takes the buffers a Gloo algorithm borrowed through its options back.
  void returned(std::unique_ptr<::gloo::transport::UnboundBuffer> buffer) {
    if (buffer) buffers_.push_back(std::move(buffer));
  }
  void succeeded() {
    for (auto& buffer : buffers_) cache_.give_back(context_, std::move(buffer));
    for (auto& scratch : scratch_) cache_.give_back_scratch(std::move(scratch));
    buffers_.clear();
    scratch_.clear();
  }

 private:
  BufferCache& cache_;
  ::gloo::Context& context_;
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> buffers_;
  std::vector<at::Tensor> scratch_;
};

// gloo::allgather's options with its buffers handed in and taken back, so that they can be cached.
class AllgatherBuffers final : public ::gloo::AllgatherOptions {
 public:
  using ::gloo::AllgatherOptions::AllgatherOptions;
  void set(std::unique_ptr<::gloo::transport::UnboundBuffer> input,
           std::unique_ptr<::gloo::transport::UnboundBuffer> output) {
    elementSize = 1;
    in = std::move(input);
    out = std::move(output);
  }
  void give_back(Borrowed& borrowed) {
    borrowed.returned(std::move(in));
    borrowed.returned(std::move(out));
  }
};

// The ring of Note [Gloo's native collectives]; input is n chunks, output one, not overlapping it.
// Each step receives into one buffer while the previous step's partial sum goes out of the other,
// and the output is one of the two: the steps of the output's parity receive into it and add in
// place, and the last step, which leaves chunk r in it, is one of them. So the scratch is one chunk
// on more than two ranks and nothing on two (a single step, into the output).
void ring_reduce_scatter(::gloo::Context& context, BufferCache& cache, std::uint32_t tag,
                         const at::Tensor& input, at::Tensor output, ReduceOp op,
                         std::chrono::milliseconds timeout) {
  const int n = context.size;
  const int r = context.rank;
  const std::int64_t numel = output.numel();
  const std::size_t chunk_bytes = output.nbytes();
  const at::Tensor chunks = input.view({n, numel});
  Borrowed borrowed(cache, context);
  const int output_parity = (n - 2) % 2;  // the last step's
  at::Tensor halves[2];
  ::gloo::transport::UnboundBuffer* buffers[2] = {nullptr, nullptr};
  halves[output_parity] = output.view({numel});
  buffers[output_parity] = &borrowed.buffer(output.data_ptr(), chunk_bytes);
  if (n > 2) {
    halves[1 - output_parity] = borrowed.scratch(output, numel);
    buffers[1 - output_parity] = &borrowed.buffer(halves[1 - output_parity].data_ptr(), chunk_bytes);
  }
  auto* in_buffer = &borrowed.buffer(input.data_ptr(), input.nbytes());
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  for (int step = 0; step + 1 < n; ++step) {
    const int half = step % 2;
    const int received_chunk = ((r - step - 2) % n + 2 * n) % n;
    const std::uint64_t slot = ring_slot(tag, step);
    buffers[half]->recv(left, slot, 0, chunk_bytes);
    if (step == 0) {
      const int sent_chunk = (r + n - 1) % n;
      in_buffer->send(right, slot, sent_chunk * chunk_bytes, chunk_bytes);
      buffers[half]->waitRecv(timeout);
      in_buffer->waitSend(timeout);
    } else {
      buffers[1 - half]->send(right, slot, 0, chunk_bytes);
      buffers[half]->waitRecv(timeout);
      buffers[1 - half]->waitSend(timeout);
    }
    combine(halves[half], halves[half], chunks[received_chunk], op);
  }
  borrowed.succeeded();
}

GlooGroup& as_gloo(compat::CollectiveGroup& group) {
  auto* gloo = dynamic_cast<GlooGroup*>(&group);
  TORCH_INTERNAL_ASSERT(gloo, "the gloo backend's group is not a GlooGroup");
  return *gloo;
}

}  // namespace

const std::vector<at::ScalarType>& gloo_reduced_dtypes() {
  static const std::vector<at::ScalarType> dtypes{at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                                  at::kChar,  at::kByte,   at::kInt,  at::kLong};
  return dtypes;
}

bool gloo_reduces_float16() {
#if TORCH_VERSION_MAJOR < 2
  return true;
#elif defined(GLOO_USE_TORCH_DTYPES)
  return GLOO_USE_TORCH_DTYPES != 0;
#else
  return false;
#endif
}

std::unique_ptr<::gloo::transport::UnboundBuffer> BufferCache::take(::gloo::Context& context, void* ptr,
                                                                    std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it) {
      if (it->context == &context && it->buffer->ptr == ptr && it->buffer->size == bytes) {
        auto buffer = std::move(it->buffer);
        buffers_.erase(std::next(it).base());
        return buffer;
      }
    }
    ++created_;
  }
  return context.createUnboundBuffer(ptr, bytes);
}

void BufferCache::give_back(::gloo::Context& context,
                            std::unique_ptr<::gloo::transport::UnboundBuffer> buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffers_.size() == kCachedBuffers) buffers_.erase(buffers_.begin());
  buffers_.push_back(Entry{&context, std::move(buffer)});
}

at::Tensor BufferCache::take_scratch(const at::Tensor& like, std::int64_t numel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = scratch_.rbegin(); it != scratch_.rend(); ++it) {
      if (it->scalar_type() == like.scalar_type() && it->numel() == numel) {
        at::Tensor scratch = std::move(*it);
        scratch_.erase(std::next(it).base());
        return scratch;
      }
    }
  }
  return at::empty({numel}, like.options());
}

void BufferCache::give_back_scratch(at::Tensor scratch) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (scratch_.size() == kCachedScratch) scratch_.erase(scratch_.begin());
  scratch_.push_back(std::move(scratch));
}

std::uint64_t BufferCache::created() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return created_;
}

compat::WorkHandle GlooGroup::run(
    bool async_op, ::c10d::OpType op, const at::Tensor& output, std::chrono::milliseconds timeout,
    std::function<void(const std::shared_ptr<::gloo::Context>&, std::uint32_t)> body) {
  // c10d's tag, taken on the caller's thread in call order as c10d's collectives take theirs, keeps
  // every rank's n-th collective on the same slot and apart from every other collective's.
  const std::uint32_t tag = nextTag();
  const std::uint64_t seq = take_seq<NativeWork::kTakesSeq>();
  std::shared_ptr<::gloo::Context> context = getContext(tag);
  if (!async_op) {
    body(context, tag);
    return {};
  }
  compat::GlooWorkArgs<::gloo::Context> args{context, output, op, seq, timeout, /*title=*/nullptr};
  auto work = c10::make_intrusive<FunctionWork>(
      args, [body = std::move(body), context = std::move(context), tag] { body(context, tag); });
  enqueue(work);
  return work;
}

compat::WorkHandle gloo_reduce_scatter(compat::CollectiveGroup& group, const at::Tensor& input,
                                       const at::Tensor& output, ReduceOp op, bool,
                                       std::chrono::milliseconds timeout) {
  // Its dtype was checked against gloo_reduced_dtypes() by the communicator (C10dCapabilities).
  GlooGroup& gloo = as_gloo(group);
  // Queued even when blocking: see Note [Gloo's native collectives].
  return gloo.run(/*async_op=*/true, ::c10d::OpType::_REDUCE_SCATTER_BASE, output, timeout,
                  [input, output, op, timeout, cache = gloo.buffers()](
                      const std::shared_ptr<::gloo::Context>& context, std::uint32_t tag) {
                    ring_reduce_scatter(*context, *cache, tag, input, output, op, timeout);
                  });
}

compat::WorkHandle gloo_allgather(compat::CollectiveGroup& group, const at::Tensor& input,
                                  const at::Tensor& output, ReduceOp, bool,
                                  std::chrono::milliseconds timeout) {
  GlooGroup& gloo = as_gloo(group);
  return gloo.run(/*async_op=*/true, ::c10d::OpType::_ALLGATHER_BASE, output, timeout,
                  [input, output, timeout, cache = gloo.buffers()](
                      const std::shared_ptr<::gloo::Context>& context, std::uint32_t tag) {
                    Borrowed borrowed(*cache, *context);
                    AllgatherBuffers options(context);
                    options.set(cache->take(*context, input.data_ptr(), input.nbytes()),
                                cache->take(*context, output.data_ptr(), output.nbytes()));
                    options.setTag(tag);
                    options.setTimeout(timeout);
                    ::gloo::allgather(options);
                    options.give_back(borrowed);
                    borrowed.succeeded();
                  });
}

}  // namespace dtrain::comm
