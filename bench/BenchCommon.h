// Small helpers shared by the reference benchmarks in bench/: flags, the torchrun-style
// environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), sizes and medians, and the ops the
// raw-library comparisons (mpi_compare, gloo_compare) time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

// "--key value" pairs; a flag given twice keeps the last value.
class Flags {
 public:
  Flags(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string key = argv[i];
      if (key.rfind("--", 0) != 0 || i + 1 >= argc) {
        throw std::invalid_argument("expected '--name value' pairs; got '" + key + "'");
      }
      values_[key.substr(2)] = argv[++i];
    }
  }
  std::string get(const std::string& key, const std::string& fallback) const {
    const auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }
  int get_int(const std::string& key, int fallback) const {
    return std::stoi(get(key, std::to_string(fallback)));
  }

 private:
  std::map<std::string, std::string> values_;
};

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

// "4K,1M,16M" -> bytes, powers of 1024.
inline std::vector<std::int64_t> parse_sizes(const std::string& list) {
  std::vector<std::int64_t> sizes;
  std::stringstream stream(list);
  std::string item;
  while (std::getline(stream, item, ',')) {
    std::int64_t scale = 1;
    const char suffix = item.empty() ? '\0' : item.back();
    if (suffix == 'K' || suffix == 'k') scale = 1024;
    if (suffix == 'M' || suffix == 'm') scale = 1024 * 1024;
    if (suffix == 'G' || suffix == 'g') scale = 1024LL * 1024 * 1024;
    if (scale != 1) item.pop_back();
    sizes.push_back(std::stoll(item) * scale);
  }
  return sizes;
}

// The operations mpi_compare and gloo_compare time, with `dtrain bench comm`'s meaning of a size:
// the all-reduced buffer, allgather's output, reduce_scatter's input, what each rank sends in
// sendrecv (to the next rank, while receiving from the previous one).
inline const std::vector<std::string>& compared_ops() {
  static const std::vector<std::string> ops{"allreduce", "reduce_scatter", "allgather", "sendrecv"};
  return ops;
}

inline std::string checked_op(const std::string& op) {
  const auto& ops = compared_ops();
  if (std::find(ops.begin(), ops.end(), op) == ops.end()) {
    throw std::invalid_argument("--op: '" + op +
                                "' is not one of allreduce, reduce_scatter, allgather, sendrecv");
  }
  return op;
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

inline std::string human_bytes(std::int64_t bytes) {
  if (bytes >= (1LL << 30) && bytes % (1LL << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes >= (1LL << 20) && bytes % (1LL << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes >= (1LL << 10) && bytes % (1LL << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

}  // namespace bench

#include <cstdio>
#include <functional>

#include "dtrain/util/Clock.h"

namespace bench {

struct Comparison {
  double plain_us = 0.0;  // median over every timed call of every round
  double dtrain_us = 0.0;
  std::vector<double> round_ratios;  // dtrain / plain, per round
};

// A B A B: each round times `iters` calls of plain, then `iters` of dtrain, so drift in the
// machine's load hits both alike. slowest(x) returns the maximum of x over ranks.
inline Comparison compare_ab(int rounds, int iters, const std::function<void()>& plain,
                             const std::function<void()>& dtrain,
                             const std::function<double(double)>& slowest) {
  auto time_calls = [&](const std::function<void()>& call, std::vector<double>& all) {
    std::vector<double> us;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = dtrain::util::Clock::now();
      call();
      us.push_back(dtrain::util::seconds_since(t0) * 1e6);
    }
    all.insert(all.end(), us.begin(), us.end());
    return slowest(median(us));
  };
  Comparison c;
  std::vector<double> plain_all, dtrain_all;
  for (int r = 0; r < rounds; ++r) {
    const double p = time_calls(plain, plain_all);
    const double d = time_calls(dtrain, dtrain_all);
    c.round_ratios.push_back(d / p);
  }
  c.plain_us = slowest(median(plain_all));
  c.dtrain_us = slowest(median(dtrain_all));
  return c;
}

inline void print_comparison(const std::string& name, std::int64_t bytes, const Comparison& c) {
  std::printf("%-24s %6s plain_us=%9.1f dtrain_us=%9.1f ratio=%.3f rounds=", name.c_str(),
              human_bytes(bytes).c_str(), c.plain_us, c.dtrain_us, c.dtrain_us / c.plain_us);
  for (std::size_t i = 0; i < c.round_ratios.size(); ++i) {
    std::printf("%s%.2f", i ? "," : "", c.round_ratios[i]);
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace bench
