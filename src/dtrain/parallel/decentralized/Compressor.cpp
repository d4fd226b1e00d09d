// Choco-SGD's compressors as byte encodings; see Compressor.h.
#include "dtrain/parallel/decentralized/Compressor.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "dtrain/util/Hash.h"

namespace dtrain::parallel {
namespace {

// Packs codes of `width` bits (each < 2^width) into bytes, least significant bit first.
void pack(const std::uint8_t* codes, std::int64_t n, int width, std::uint8_t* out) {
  std::int64_t bit = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int b = 0; b < width; ++b, ++bit) {
      if ((codes[i] >> b) & 1U) out[bit / 8] |= static_cast<std::uint8_t>(1U << (bit % 8));
    }
  }
}

void unpack(const std::uint8_t* in, std::int64_t n, int width, std::uint8_t* codes) {
  std::int64_t bit = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint8_t code = 0;
    for (int b = 0; b < width; ++b, ++bit) {
      if ((in[bit / 8] >> (bit % 8)) & 1U) code = static_cast<std::uint8_t>(code | (1U << b));
    }
    codes[i] = code;
  }
}

std::int64_t packed_bytes(std::int64_t n, int width) {
  return (n * width + 7) / 8;
}

}  // namespace

Compressor::Compressor(CompressorOptions options, std::int64_t length, std::uint64_t seed)
    : options_(std::move(options)), length_(length), seed_(seed) {
  k_ = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(std::ceil(options_.ratio * static_cast<double>(length))));
  k_ = std::min(k_, length);
  switch (options_.kind) {
    case CompressorKind::Identity:
      bytes_ = 4 * length;
      return;
    case CompressorKind::TopK:
      bytes_ = 8 * k_;
      return;
    case CompressorKind::RandomK:
      bytes_ = 4 * k_;
      return;
    case CompressorKind::Sign:
      bytes_ = packed_bytes(length, 1) + 4;
      return;
    case CompressorKind::QBit:
      if (options_.bits < 1 || options_.bits > 7)
        throw std::invalid_argument("parallel.decentralized.bits: expected 1..7 bits per coordinate");
      bytes_ = packed_bytes(length, options_.bits + 1) + 4;
      return;
  }
  throw std::logic_error("Compressor: a CompressorKind without an encoding");
}

torch::Generator Compressor::generator(int node, std::int64_t round, std::uint64_t stream) const {
  util::Fnv1a64 hash;
  const std::uint64_t parts[] = {seed_, static_cast<std::uint64_t>(node), static_cast<std::uint64_t>(round),
                                 stream};
  hash.add(parts, sizeof(parts));
  return at::make_generator<at::CPUGeneratorImpl>(hash.value());
}

torch::Tensor Compressor::random_indices(int node, std::int64_t round) const {
  auto gen = generator(node, round, 1);
  return torch::randperm(length_, gen, torch::kLong).narrow(0, 0, k_);
}

torch::Tensor Compressor::encode(const torch::Tensor& v_anywhere, int node, std::int64_t round) const {
  // Messages are bytes packed on the host, wherever the model lives; decode's caller moves the
  // decoded vector back.
  const auto v = v_anywhere.to(torch::kCPU);
  TORCH_INTERNAL_ASSERT(v.dim() == 1 && v.numel() == length_ && v.scalar_type() == torch::kFloat);
  const auto kind = options_.kind;
  auto message = torch::zeros({bytes_}, torch::kUInt8);
  auto* out = message.data_ptr<std::uint8_t>();
  if (kind == CompressorKind::Identity) {
    std::memcpy(out, v.contiguous().data_ptr<float>(), static_cast<std::size_t>(bytes_));
  } else if (kind == CompressorKind::TopK || kind == CompressorKind::RandomK) {
    const auto indices =
        kind == CompressorKind::TopK ? std::get<1>(v.abs().topk(k_)) : random_indices(node, round);
    const auto values = v.index_select(0, indices).contiguous();
    std::memcpy(out, values.data_ptr<float>(), static_cast<std::size_t>(4 * k_));
    if (kind == CompressorKind::TopK) {
      const auto idx = indices.to(torch::kInt).contiguous();
      std::memcpy(out + 4 * k_, idx.data_ptr<std::int32_t>(), static_cast<std::size_t>(4 * k_));
    }
  } else if (kind == CompressorKind::Sign) {
    const float scale = v.abs().sum().item<float>() / static_cast<float>(length_);
    std::memcpy(out, &scale, 4);
    const auto codes = v.lt(0).to(torch::kUInt8).contiguous();
    pack(codes.data_ptr<std::uint8_t>(), length_, 1, out + 4);
  } else {
    const float norm = v.norm().item<float>();
    std::memcpy(out, &norm, 4);
    const int s = (1 << options_.bits) - 1;
    auto gen = generator(node, round, 2);
    const auto u = torch::rand({length_}, gen, torch::kFloat);
    auto levels = norm > 0 ? (v.abs() / norm * s + u).floor().clamp_max(s) : torch::zeros_like(v);
    const auto codes =
        (levels.to(torch::kUInt8) + v.lt(0).to(torch::kUInt8) * static_cast<std::uint8_t>(1 << options_.bits))
            .contiguous();
    pack(codes.data_ptr<std::uint8_t>(), length_, options_.bits + 1, out + 4);
  }
  return message;
}

torch::Tensor Compressor::decode(const torch::Tensor& message, int node, std::int64_t round) const {
  TORCH_INTERNAL_ASSERT(message.numel() == bytes_ && message.scalar_type() == torch::kUInt8);
  const auto bytes = message.contiguous();
  const auto* in = bytes.data_ptr<std::uint8_t>();
  const auto kind = options_.kind;
  auto q = torch::zeros({length_}, torch::kFloat);
  if (kind == CompressorKind::Identity) {
    std::memcpy(q.data_ptr<float>(), in, static_cast<std::size_t>(bytes_));
  } else if (kind == CompressorKind::TopK || kind == CompressorKind::RandomK) {
    auto values = torch::empty({k_}, torch::kFloat);
    std::memcpy(values.data_ptr<float>(), in, static_cast<std::size_t>(4 * k_));
    torch::Tensor indices;
    if (kind == CompressorKind::TopK) {
      auto idx = torch::empty({k_}, torch::kInt);
      std::memcpy(idx.data_ptr<std::int32_t>(), in + 4 * k_, static_cast<std::size_t>(4 * k_));
      indices = idx.to(torch::kLong);
    } else {
      indices = random_indices(node, round);
    }
    q.index_put_({indices}, values);
  } else {
    float scale = 0;
    std::memcpy(&scale, in, 4);
    const int width = kind == CompressorKind::Sign ? 1 : options_.bits + 1;
    auto codes = torch::empty({length_}, torch::kUInt8);
    unpack(in + 4, length_, width, codes.data_ptr<std::uint8_t>());
    const auto negative = codes.ge(1 << (width - 1)).to(torch::kFloat);
    const auto sign = 1.0 - 2.0 * negative;
    if (kind == CompressorKind::Sign) {
      q = sign * scale;
    } else {
      const int s = (1 << options_.bits) - 1;
      const double l = static_cast<double>(length_);
      const double tau = 1.0 + std::min(l / (s * s), std::sqrt(l) / s);
      const auto levels = codes.bitwise_and((1 << options_.bits) - 1).to(torch::kFloat);
      q = sign * levels * (scale / (s * tau));
    }
  }
  return q;
}

}  // namespace dtrain::parallel
