// `dtrain train --help`'s list of what a configuration may name, from the registries.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "dtrain/cli/Commands.h"
#include "dtrain/config/Registry.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"

namespace dtrain::cli {
namespace {

// The keys of section `prefix` ("parallel.data_parallel."), without the prefix.
std::vector<std::string> keys_under(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& key : config::config_keys()) {
    if (key.rfind(prefix, 0) == 0) out.push_back(key.substr(prefix.size()));
  }
  return out;
}

std::string section(const char* title, const char* key) {
  const auto& choices = config::registered_choices(key).choices();
  std::size_t width = 0;
  for (const auto& c : choices) width = std::max(width, c.name.size());
  std::string out = fmt::format("\n{} ({}):\n", title, key);
  for (const auto& c : choices) {
    out += fmt::format("  {:<{}}  {}", c.name, width, c.help);
    // Other spellings, but not the name itself in other letters: case never matters.
    std::vector<std::string> aliases;
    for (const auto& alias : c.aliases) {
      if (!config::ChoiceSet{alias.c_str()}.resolve(c.name)) aliases.push_back(alias);
    }
    if (!aliases.empty()) out += fmt::format(" (also {})", fmt::join(aliases, ", "));
    if (key == std::string(config::kStrategyKey)) {
      // Its own section and the others it reads (decentralized: parallel.graph).
      for (const auto& name : c.sections) {
        const auto options = keys_under("parallel." + name + ".");
        if (!options.empty()) out += fmt::format("; parallel.{}.{{{}}}", name, fmt::join(options, ", "));
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string registered_names_help() {
  return section("Strategies", config::kStrategyKey) + section("Models", config::kModelKey) +
         section("Optimizers", config::kOptimizerKey) + section("Schedules", config::kScheduleKey) +
         section("Losses", config::kLossKey) + section("Data sets", config::kDatasetKey) +
         section("Partitions", config::kPartitionKey);
}

}  // namespace dtrain::cli
