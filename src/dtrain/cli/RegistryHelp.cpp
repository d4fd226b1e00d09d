// `dtrain train --help`'s lists: every configuration key with its default and help, from the same
// description the YAML reader validates against, and what a configuration may name, from the
// registries.
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

// Where the help of every key starts; a key=default that leaves less than two spaces before it puts
// its help on the next line.
constexpr std::size_t kHelpColumn = 44;

// Whether `help` names every one of a choice's names ("cpu or cuda").
bool names_all(const std::string& help, const std::string& allowed) {
  std::size_t start = 0;
  for (auto end = allowed.find(", "); start <= allowed.size(); end = allowed.find(", ", start)) {
    if (end == std::string::npos) end = allowed.size();
    if (help.find(allowed.substr(start, end - start)) == std::string::npos) return false;
    start = end + 2;
  }
  return true;
}

// A key's line of help; a choice of a closed set that no layer registers lists its names unless the
// help names them already (the registered ones are listed below the keys).
std::string help_of(const config::KeyHelp& k) {
  static const std::vector<std::string> kListedBelow{
      config::kStrategyKey, config::kModelKey,   config::kOptimizerKey, config::kScheduleKey,
      config::kLossKey,     config::kDatasetKey, config::kPartitionKey};
  std::string help = k.help;
  const bool below = std::find(kListedBelow.begin(), kListedBelow.end(), k.key) != kListedBelow.end();
  if (!k.allowed.empty() && !below && !names_all(help, k.allowed)) {
    help += (help.empty() ? "" : " ") + std::string("(") + k.allowed + ")";
  }
  return help;
}

}  // namespace

std::string config_keys_help() {
  std::string out = "\nConfiguration keys (in CONFIG's YAML, or key=value after it), each as key=default:\n";
  for (const auto& k : config::config_key_help()) {
    const std::string setting = k.key + "=" + k.default_text;
    const std::string help = help_of(k);
    if (help.empty()) {
      out += fmt::format("  {}\n", setting);
    } else if (setting.size() + 4 <= kHelpColumn) {
      out += fmt::format("  {:<{}}{}\n", setting, kHelpColumn - 2, help);
    } else {
      out += fmt::format("  {}\n{:<{}}{}\n", setting, "", kHelpColumn, help);
    }
  }
  return out;
}

std::string registered_names_help() {
  return section("Strategies", config::kStrategyKey) + section("Models", config::kModelKey) +
         section("Optimizers", config::kOptimizerKey) + section("Schedules", config::kScheduleKey) +
         section("Losses", config::kLossKey) + section("Data sets", config::kDatasetKey) +
         section("Partitions", config::kPartitionKey);
}

}  // namespace dtrain::cli
