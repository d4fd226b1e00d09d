// report.md: the tables as Markdown tables, the figures as links to plots/*.png.
#include <fmt/format.h>

#include "dtrain/experiment/ReportPage.h"

namespace dtrain::experiment {

std::string markdown_table(const Table& table) {
  std::string s;
  for (std::size_t r = 0; r < table.size(); ++r) {
    s += "|";
    for (const auto& cell : table[r]) s += " " + cell + " |";
    s += "\n";
    if (r == 0) {
      s += "|";
      for (std::size_t c = 0; c < table[r].size(); ++c) s += "---|";
      s += "\n";
    }
  }
  return s;
}

std::string markdown_page(const ReportPage& page) {
  std::string md = "# " + page.title + "\n\n## Runs\n\n" + markdown_table(page.runs);
  for (const auto& warning : page.warnings) md += "\n**Note:** " + warning + "\n";
  if (page.steps) md += "\n## Time and bytes per step\n\n" + markdown_table(*page.steps);
  if (page.throughput) {
    md += "\n## Throughput: model x batch against precision x workers\n\n" + markdown_table(*page.throughput);
  }
  md += "\n## Figures\n\n";
  for (const auto& figure : page.figures)
    md += fmt::format("![{}](plots/{})\n\n", figure.caption, figure.png);
  return md;
}

}  // namespace dtrain::experiment
