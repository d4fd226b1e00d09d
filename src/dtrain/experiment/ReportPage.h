// The report's pages: report.md, whose figures link to plots/*.png, and report.html, which needs
// nothing beside it: the figures are embedded as base64 PNG and nothing is fetched from elsewhere.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/experiment/ReportFigures.h"
#include "dtrain/experiment/ReportTables.h"

namespace dtrain::experiment {

// What a report shows, in order.
struct ReportPage {
  std::string title;
  Table runs;                         // "Runs"
  std::vector<std::string> warnings;  // under the runs: figures not to be taken as they stand
  std::optional<Table> steps;         // "Time and bytes per step"
  std::optional<Table> throughput;    // "Throughput: model x batch against precision x workers"
  std::vector<Figure> figures;        // "Figures"
};

// A Markdown table: the first row is the header.
std::string markdown_table(const Table& table);

std::string markdown_page(const ReportPage& page);

// An HTML table: the first row is the header (th).
std::string html_table(const Table& table);

// RFC 4648 base64, padded with '='.
std::string base64(const std::string& bytes);

// The page with every figure read from <plots>/<png> and embedded as a data: URI.
std::string html_page(const ReportPage& page, const std::filesystem::path& plots);

}  // namespace dtrain::experiment
