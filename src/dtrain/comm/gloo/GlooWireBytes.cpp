// The bytes each rank sends in Gloo's algorithms; see Note [Gloo's algorithms]. The loops follow
// Gloo's own index arithmetic so that the per-rank figures are exact, rounding included.
#include "dtrain/comm/gloo/GlooWireBytes.h"

#include <algorithm>

namespace dtrain::comm {
namespace {

std::uint64_t round_up(std::uint64_t value, std::uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Gloo's AllreduceOptions::kMaxSegmentSize.
constexpr std::uint64_t kMaxSegmentBytes = 1024 * 1024;

}  // namespace

std::uint64_t gloo_ring_allreduce_bytes(int rank, int size, std::uint64_t bytes, std::uint64_t element_size) {
  if (size < 2 || bytes == 0) return 0;
  const auto n = static_cast<std::uint64_t>(size);
  const auto r = static_cast<std::uint64_t>(rank);
  const std::uint64_t max_segment =
      element_size * std::max<std::uint64_t>(1, kMaxSegmentBytes / element_size);
  const std::uint64_t segments = round_up(std::max((bytes + max_segment - 1) / max_segment, 2 * n), n);
  const std::uint64_t per_rank = segments / n;
  const std::uint64_t segment_bytes = round_up((bytes + segments - 1) / segments, element_size);
  // Segment s covers [s * segment_bytes, (s + 1) * segment_bytes) clipped to the buffer.
  auto length = [&](std::uint64_t s) {
    const std::uint64_t offset = (s % segments) * segment_bytes;
    return offset >= bytes ? 0 : std::min(segment_bytes, bytes - offset);
  };
  std::uint64_t sent = 0;
  for (std::uint64_t i = 0; i < segments - per_rank; ++i) {
    sent += length((r + 1) * per_rank + i);  // reduce-scatter
    sent += length(r * per_rank + i);        // all-gather
  }
  return sent;
}

std::uint64_t gloo_broadcast_bytes(int rank, int size, int root, std::uint64_t bytes) {
  const int v = (rank - root + size) % size;
  std::uint64_t sent = 0;
  for (int step = 1; step < size; step *= 2) {
    if (v < step && v + step < size) sent += bytes;
  }
  return sent;
}

std::uint64_t gloo_wire_bytes(const WireCall& call, int rank, int size) {
  switch (call.op) {
    case CommOp::Allreduce:
      return gloo_ring_allreduce_bytes(rank, size, call.bytes(),
                                       static_cast<std::uint64_t>(call.element_size));
    case CommOp::Broadcast:
      return gloo_broadcast_bytes(rank, size, call.root, call.bytes());
    default:  // the plain algorithms: Gloo's ring all-gather and reduce-scatter, direct messages
      return plain_wire_bytes(call, rank, size);
  }
}

}  // namespace dtrain::comm
