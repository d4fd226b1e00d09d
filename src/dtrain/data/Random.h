// Seeds derived from one run seed, so every rank (and every loader thread) can recompute the same
// permutation or augmentation without talking to the others.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <initializer_list>

namespace dtrain::data {

// SplitMix64 over the words in order: a stable, well-mixed seed for (seed, epoch, batch, ...).
std::uint64_t derive_seed(std::uint64_t seed, std::initializer_list<std::uint64_t> words);

// A CPU generator (Mersenne twister, same sequence on every platform) seeded with `seed`.
torch::Generator make_generator(std::uint64_t seed);

}  // namespace dtrain::data
