// What `dtrain` says about a command line it cannot parse: one line naming the unknown command or
// option and, for a likely typo, the nearest right one, as a misspelt configuration key gets.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "dtrain/cli/Commands.h"
#include "dtrain/config/ValueText.h"

namespace dtrain::cli {
namespace {

// The subcommands from the top down to the one being parsed: "train", or "bench comm".
std::vector<const CLI::App*> parsed_chain(const CLI::App& app) {
  std::vector<const CLI::App*> chain{&app};
  for (auto subs = app.get_subcommands(); !subs.empty(); subs = chain.back()->get_subcommands()) {
    chain.push_back(subs.front());
  }
  return chain;
}

// "dtrain train", "dtrain bench comm".
std::string command_name(const std::vector<const CLI::App*>& chain) {
  std::string name = "dtrain";
  for (std::size_t i = 1; i < chain.size(); ++i) name += " " + chain[i]->get_name();
  return name;
}

// The long names of the options of `cmd`, without their dashes: "nproc", "help". One-letter names
// are left out: any one-letter typo is one edit from each of them.
std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* option : cmd.get_options()) {
    for (const auto& name : option->get_lnames()) names.push_back(name);
  }
  return names;
}

// "unknown option --nprocs; did you mean --nproc?" for the first word of `cmd` that looks like an
// option and is none; "" when no such word was left over.
std::string unknown_option(const CLI::App& cmd) {
  for (const auto& word : cmd.remaining()) {
    if (word.size() < 2 || word.front() != '-') continue;
    const std::string flag = word.substr(0, word.find('='));  // --nprocs=2
    const auto first = flag.find_first_not_of('-');
    const std::string name = first == std::string::npos ? "" : flag.substr(first);
    std::string message = "unknown option " + flag;
    const auto suggestion = name.size() < 2 ? "" : config::detail::closest(name, option_names(cmd));
    if (!suggestion.empty()) message += "; did you mean --" + suggestion + "?";
    return message;
  }
  return {};
}

}  // namespace

CLI::Validator at_least(long long minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        long long value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "expected a whole number, found " + text;
        if (value < minimum) return "must be at least " + std::to_string(minimum) + ", found " + text;
        return {};
      },
      "INT>=" + std::to_string(minimum));
}

std::string unknown_command(const CLI::App& app, const std::string& word) {
  if (word.empty() || word.front() == '-') return {};
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands({})) {
    if (sub->check_name(word)) return {};
    names.push_back(sub->get_name());
  }
  std::string message = "unknown command '" + word + "'; the commands are " + config::detail::join(names);
  const auto suggestion = config::detail::closest(word, names);
  if (!suggestion.empty()) message += "; did you mean " + suggestion + "?";
  return message;
}

std::string parse_error_line(const CLI::App& app, const CLI::ParseError& error) {
  const auto chain = parsed_chain(app);
  const std::string command = command_name(chain);
  std::string problem = error.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&error)) {
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (auto unknown = unknown_option(**it); !unknown.empty()) {
        problem = std::move(unknown);
        break;
      }
    }
  }
  return fmt::format("dtrain: error: {} ({} --help lists the options)", problem, command);
}

}  // namespace dtrain::cli
