// The partition schemes; see Partition.h.
#include "dtrain/data/Partition.h"

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"
#include "dtrain/data/Random.h"

#include <fmt/format.h>
#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace dtrain::data {

namespace {

// Cuts `order` into `world` near-equal contiguous pieces and appends piece r to shares[r].
void split_even(const torch::Tensor& order, int world, std::vector<std::vector<torch::Tensor>>& shares) {
  const std::int64_t n = order.size(0);
  for (int r = 0; r < world; ++r) {
    const std::int64_t begin = n * r / world, end = n * (r + 1) / world;
    shares[r].push_back(order.narrow(0, begin, end - begin));
  }
}

std::vector<Shard> finish(int world, std::vector<std::vector<torch::Tensor>>& pieces,
                          const torch::Tensor& held_out) {
  std::vector<Shard> shards(world);
  std::vector<std::int64_t> sizes;
  for (int r = 0; r < world; ++r) {
    auto all = pieces[r].empty() ? torch::empty({0}, torch::kLong) : torch::cat(pieces[r]);
    shards[r].indices = std::get<0>(all.sort());
    sizes.push_back(shards[r].indices.size(0));
  }
  for (int r = 0; r < world; ++r) {
    shards[r].rank = r;
    shards[r].world = world;
    shards[r].held_out = held_out.defined() ? held_out : torch::empty({0}, torch::kLong);
    shards[r].rank_sizes = sizes;
  }
  return shards;
}

std::vector<Shard> hetero(int world, int classes_per_rank, const torch::Tensor& labels,
                          torch::Generator& gen) {
  const auto classes = std::get<0>(at::_unique(labels, /*sorted=*/true));
  const auto c = classes.size(0);
  if (classes_per_rank == 0) {
    // Even split: each holder (rank, or graph node) its own classes, as DiNNO's hetero split.
    if (world > c) {
      throw std::invalid_argument(
          fmt::format("data.partition hetero: {} ranks or graph nodes but {} classes, so some would hold no "
                      "class; use at most "
                      "{}, or set data.classes_per_rank >= 1 to let holders share classes",
                      world, c, c));
    }
    classes_per_rank = static_cast<int>(c / world);
  }
  TORCH_CHECK(classes_per_rank >= 1 && classes_per_rank <= c, "data.classes_per_rank: expected 1..", c,
              " (the classes in the training set), found ", classes_per_rank);
  // holders[j]: the ranks that hold class j.
  std::vector<std::vector<int>> holders(static_cast<std::size_t>(c));
  for (int r = 0; r < world; ++r) {
    for (int j = 0; j < classes_per_rank; ++j) {
      holders[static_cast<std::size_t>((static_cast<std::int64_t>(r) * classes_per_rank + j) % c)].push_back(
          r);
    }
  }
  int next = 0;
  for (auto& h : holders) {
    if (h.empty()) h.push_back(next++ % world);
  }
  std::vector<std::vector<torch::Tensor>> pieces(world);
  for (std::int64_t j = 0; j < c; ++j) {
    auto members = labels.eq(classes[j]).nonzero().view({-1});
    members = members.index_select(0, torch::randperm(members.size(0), gen, torch::kLong));
    const auto& h = holders[static_cast<std::size_t>(j)];
    const auto m = static_cast<std::int64_t>(h.size());
    for (std::int64_t i = 0; i < m; ++i) {
      const std::int64_t begin = members.size(0) * i / m, end = members.size(0) * (i + 1) / m;
      pieces[h[static_cast<std::size_t>(i)]].push_back(members.narrow(0, begin, end - begin));
    }
  }
  return finish(world, pieces, {});
}

std::vector<Shard> dirichlet(int world, double alpha, const torch::Tensor& labels, std::uint64_t seed) {
  TORCH_CHECK(alpha > 0, "data.dirichlet_alpha: expected > 0, found ", alpha);
  const std::int64_t n = labels.size(0);
  const auto classes = std::get<0>(at::_unique(labels, /*sorted=*/true));
  auto shuffle_gen = make_generator(derive_seed(seed, {0xd1c, 0}));
  std::vector<torch::Tensor> members;
  for (std::int64_t j = 0; j < classes.size(0); ++j) {
    auto m = labels.eq(classes[j]).nonzero().view({-1});
    members.push_back(m.index_select(0, torch::randperm(m.size(0), shuffle_gen, torch::kLong)));
  }
  // A draw can leave a rank (almost) empty; redraw, as federated-learning benchmarks do, until every
  // rank holds a usable share.
  const std::int64_t required = std::min<std::int64_t>(10, n / world);
  constexpr int kAttempts = 1000;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto gen = make_generator(derive_seed(seed, {0xd1c, static_cast<std::uint64_t>(attempt) + 1}));
    std::vector<std::vector<torch::Tensor>> pieces(world);
    for (const auto& m : members) {
      auto g = at::_standard_gamma(torch::full({world}, alpha, torch::kDouble), gen);
      auto p = g / g.sum();
      if (!torch::isfinite(p).all().item<bool>()) p = torch::full({world}, 1.0 / world, torch::kDouble);
      auto cuts = (p.cumsum(0) * static_cast<double>(m.size(0))).round().to(torch::kLong);
      auto cut = cuts.accessor<std::int64_t, 1>();
      std::int64_t begin = 0;
      for (int r = 0; r < world; ++r) {
        const std::int64_t end =
            r == world - 1 ? m.size(0) : std::clamp<std::int64_t>(cut[r], begin, m.size(0));
        pieces[r].push_back(m.narrow(0, begin, end - begin));
        begin = end;
      }
    }
    auto shards = finish(world, pieces, {});
    if (shards[0].min_size() >= required) return shards;
  }
  TORCH_CHECK(false, "data.dirichlet_alpha: with alpha = ", alpha, ", ", world, " ranks and ", n,
              " samples, no draw in ", kAttempts, " gave every rank at least ", required,
              " samples; use a larger alpha, fewer ranks or more data");
}

}  // namespace

std::int64_t Shard::min_size() const {
  return *std::min_element(rank_sizes.begin(), rank_sizes.end());
}
std::int64_t Shard::max_size() const {
  return *std::max_element(rank_sizes.begin(), rank_sizes.end());
}

namespace {

// Every scheme, written once; config/ validates data.partition against this list.
[[maybe_unused]] const bool kPartitionsRegistered = [] {
  for (const auto& choice : std::vector<config::Choice>{
           {"random", "iid: a random equal share per rank"},
           {"hetero", "each rank a subset of the classes (data.classes_per_rank)"},
           {"dirichlet", "class proportions per rank drawn from Dirichlet(data.dirichlet_alpha)"},
           {"kfold", "fold data.fold of data.num_folds held out for validation, the rest shared"},
           {"subset", "the first data.subset_size samples, shared at random"},
       }) {
    config::register_choice(config::kPartitionKey, choice);
  }
  return true;
}();

}  // namespace

PartitionOptions partition_options(const config::DataConfig& data) {
  PartitionOptions o;
  o.scheme = data.partition;
  o.classes_per_rank = data.classes_per_rank;
  o.dirichlet_alpha = data.dirichlet_alpha;
  o.num_folds = data.num_folds;
  o.fold = data.fold;
  o.subset_size = data.subset_size;
  return o;
}

std::vector<Shard> partition_all(int world, const PartitionOptions& options, const torch::Tensor& labels,
                                 std::uint64_t seed) {
  TORCH_CHECK(world >= 1, "partition: expected world size >= 1, found ", world);
  TORCH_CHECK(labels.defined() && labels.dim() == 1, "partition: expected labels (N), found ",
              labels.defined() ? labels.sizes() : c10::IntArrayRef{});
  const auto lab = labels.to(torch::kLong).contiguous();
  const std::int64_t n = lab.size(0);
  TORCH_CHECK(n >= world, "data.partition: ", n, " training samples cannot give each of ", world,
              " ranks a sample; use fewer ranks or a larger data.subset_size");
  auto gen = make_generator(derive_seed(seed, {0x9a27}));
  std::vector<std::vector<torch::Tensor>> pieces(world);
  const std::string s =
      config::registered_choices(config::kPartitionKey).resolve(options.scheme).value_or(options.scheme);
  if (s == "random") {
    split_even(torch::randperm(n, gen, torch::kLong), world, pieces);
    return finish(world, pieces, {});
  }
  if (s == "hetero") return hetero(world, options.classes_per_rank, lab, gen);
  if (s == "dirichlet") return dirichlet(world, options.dirichlet_alpha, lab, seed);
  if (s == "kfold") {
    const int k = options.num_folds;
    TORCH_CHECK(k >= 2, "data.num_folds: expected >= 2, found ", k);
    TORCH_CHECK(options.fold >= 0 && options.fold < k, "data.fold: expected 0..", k - 1,
                " (data.num_folds = ", k, "), found ", options.fold);
    auto order = torch::randperm(n, gen, torch::kLong);
    const std::int64_t begin = n * options.fold / k, end = n * (options.fold + 1) / k;
    auto held_out = std::get<0>(order.narrow(0, begin, end - begin).sort());
    auto train = torch::cat({order.narrow(0, 0, begin), order.narrow(0, end, n - end)});
    TORCH_CHECK(train.size(0) >= world, "data.num_folds: ", train.size(0), " training samples outside fold ",
                options.fold, " cannot give each of ", world, " ranks a sample");
    split_even(train, world, pieces);
    return finish(world, pieces, held_out);
  }
  if (s == "subset") {
    TORCH_CHECK(options.subset_size >= 0, "data.subset_size: expected >= 0, found ", options.subset_size);
    const std::int64_t keep = options.subset_size == 0 ? n : std::min(options.subset_size, n);
    TORCH_CHECK(keep >= world, "data.subset_size: ", keep, " samples cannot give each of ", world,
                " ranks a sample");
    for (int r = 0; r < world; ++r) pieces[r].push_back(torch::arange(r, keep, world, torch::kLong));
    return finish(world, pieces, {});
  }
  TORCH_CHECK(false, "data.partition: unknown scheme '", s,
              "'; expected one of: ", config::registered_choices(config::kPartitionKey).list());
}

Shard partition(int rank, int world, const PartitionOptions& options, const torch::Tensor& labels,
                std::uint64_t seed) {
  TORCH_CHECK(rank >= 0 && rank < world, "partition: rank ", rank, " outside 0..", world - 1);
  return partition_all(world, options, labels, seed)[static_cast<std::size_t>(rank)];
}

Shard partition(int rank, int world, const config::DataConfig& data, const torch::Tensor& labels,
                std::uint64_t seed) {
  return partition(rank, world, partition_options(data), labels, seed);
}

Shard whole(std::int64_t size) {
  Shard s;
  s.indices = torch::arange(size, torch::kLong);
  s.held_out = torch::empty({0}, torch::kLong);
  s.rank_sizes = {size};
  return s;
}

}  // namespace dtrain::data

DTRAIN_LINK_ANCHOR(dtrain_partitions_registry);
