// Seed derivation and generators for the data layer; see Random.h.
#include "dtrain/data/Random.h"

#include <ATen/CPUGeneratorImpl.h>

namespace dtrain::data {

namespace {
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

std::uint64_t derive_seed(std::uint64_t seed, std::initializer_list<std::uint64_t> words) {
  std::uint64_t h = splitmix64(seed);
  for (std::uint64_t w : words) h = splitmix64(h ^ splitmix64(w + 0x632be59bd9b4e019ULL));
  return h;
}

torch::Generator make_generator(std::uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

}  // namespace dtrain::data
