// Compressors for Choco-SGD (Koloskova, Stich and Jaggi, ICML 2019, "Decentralized Stochastic
// Optimization and Gossip Algorithms with Compressed Communication"; code epfml/ChocoSGD). A
// compressor turns a vector v (L float32) into the bytes a node sends, and back into Q(v):
//   identity  v itself: 4L bytes
//   topk      the k = ceil(ratio L) largest |v_i|, values and int32 indices: 8k bytes
//   randomk   k coordinates drawn from a generator both ends seed with (seed, node, round), so
//             only the values travel: 4k bytes (not rescaled by L/k, as in the paper's rand_k)
//   sign      (|v|_1 / L) sign(v): one bit per coordinate and the scale: ceil(L/8) + 4 bytes
//   qbit      stochastic rounding of |v_i| / |v|_2 to s = 2^bits - 1 levels with a sign bit, scaled
//             by 1/tau, tau = 1 + min(L/s^2, sqrt(L)/s), the paper's biased qsgd that keeps the
//             compression contractive: ceil(L (bits + 1) / 8) + 4 bytes
// The messages are byte tensors of a fixed length for a given (kind, L), what gossip needs to
// batch the messages of several nodes. The paper's code simulates the transfer; here the encoded
// bytes are what goes on the wire.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "dtrain/parallel/decentralized/DecentralizedOptions.h"

namespace dtrain::parallel {

struct CompressorOptions {
  CompressorKind kind = CompressorKind::TopK;
  double ratio = 0.1;  // TopK, RandomK
  int bits = 4;        // QBit, 1..7
};

class Compressor {
 public:
  Compressor(CompressorOptions options, std::int64_t length, std::uint64_t seed);

  // (message_bytes()) uint8 on the CPU: the encoding of v (length float32, on any device). `node`
  // and `round` seed the random choices (randomk's coordinates, qbit's rounding) so that the
  // receiver can redo them.
  torch::Tensor encode(const torch::Tensor& v, int node, std::int64_t round) const;
  // Q(v) (length float32, on the CPU) from a message of `node` at `round`.
  torch::Tensor decode(const torch::Tensor& message, int node, std::int64_t round) const;
  std::int64_t message_bytes() const { return bytes_; }

 private:
  torch::Tensor random_indices(int node, std::int64_t round) const;
  torch::Generator generator(int node, std::int64_t round, std::uint64_t stream) const;

  CompressorOptions options_;
  std::int64_t length_;
  std::uint64_t seed_;
  std::int64_t k_ = 0;  // topk, randomk
  std::int64_t bytes_ = 0;
};

}  // namespace dtrain::parallel
