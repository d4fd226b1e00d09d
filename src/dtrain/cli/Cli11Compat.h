// CLI11 from 2.5 on wraps a command's description and footer to its paragraph width, which breaks
// `dtrain train --help`'s table of keys and defaults (laid out line by line already). Where the
// formatter can be told not to (enable_footer_formatting), it is; older CLI11 (bookworm's 2.1)
// prints the text as written anyway.
#pragma once

#include <CLI/CLI.hpp>

namespace dtrain::cli::compat {

template <class Formatter>
auto print_text_as_written(Formatter& formatter, int) -> decltype(formatter.enable_footer_formatting(false)) {
  formatter.enable_description_formatting(false);
  return formatter.enable_footer_formatting(false);
}

template <class Formatter>
void print_text_as_written(Formatter&, long) {}

// For `app` and the subcommands added to it afterwards, which share its formatter.
inline void print_text_as_written(CLI::App& app) {
  if (const auto formatter = app.get_formatter()) print_text_as_written(*formatter, 0);
}

}  // namespace dtrain::cli::compat
