// Looking up a row of kCollectives by name, and the plain algorithms' wire bytes; see Collectives.h.
#include "dtrain/comm/Collectives.h"

#include <cstring>

#include "dtrain/comm/WireBytes.h"

namespace dtrain::comm {

const CollectiveInfo* find_collective(const char* name) {
  for (const auto& row : kCollectives) {
    if (row.name == name || std::strcmp(row.name, name) == 0) return &row;
  }
  return nullptr;
}

std::uint64_t plain_wire_bytes(const WireCall& call, int rank, int size) {
  const auto n = static_cast<std::uint64_t>(size);
  const std::uint64_t bytes = call.bytes();
  switch (collective_info(call.op).wire) {
    case WireForm::Nothing:
      return 0;
    case WireForm::Payload:
      return bytes;
    case WireForm::PayloadToEveryOther:
      return (n - 1) * bytes;
    case WireForm::ChunkToEveryOther:
      return (n - 1) * (bytes / n);
    case WireForm::RingAllreduce:
      return 2 * (n - 1) * bytes / n;
    case WireForm::RingBroadcast:
      return (rank + 1) % size == call.root ? 0 : bytes;
  }
  return 0;
}

}  // namespace dtrain::comm
