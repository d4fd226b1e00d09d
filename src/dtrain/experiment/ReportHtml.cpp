// report.html: one self-contained file (inline style, figures as base64 data: URIs) that can be
// mailed or archived alone.
#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "dtrain/experiment/ReportPage.h"

namespace dtrain::experiment {
namespace {

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("report: cannot read the figure " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* const kStyle =
    "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:4px 8px;"
    "text-align:right}th{background:#eee}img{max-width:100%}</style>";

}  // namespace

std::string html_table(const Table& table) {
  std::string s = "<table>\n";
  for (std::size_t r = 0; r < table.size(); ++r) {
    s += "<tr>";
    const char* tag = r == 0 ? "th" : "td";
    for (const auto& cell : table[r]) s += fmt::format("<{}>{}</{}>", tag, cell, tag);
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string base64(const std::string& bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto byte = [&](std::size_t i) { return static_cast<unsigned>(static_cast<unsigned char>(bytes[i])); };
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    out += {table[v >> 18], table[(v >> 12) & 63], table[(v >> 6) & 63], table[v & 63]};
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const unsigned v = (byte(i) << 16) | (two ? byte(i + 1) << 8 : 0u);
    out += {table[v >> 18], table[(v >> 12) & 63], two ? table[(v >> 6) & 63] : '=', '='};
  }
  return out;
}

std::string html_page(const ReportPage& page, const std::filesystem::path& plots) {
  std::string html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + page.title +
                     "</title>\n" + kStyle + "</head><body>\n<h1>" + page.title + "</h1>\n<h2>Runs</h2>\n" +
                     html_table(page.runs);
  for (const auto& warning : page.warnings) html += "<p><strong>Note:</strong> " + warning + "</p>\n";
  if (page.steps) html += "<h2>Time and bytes per step</h2>\n" + html_table(*page.steps);
  if (page.throughput) {
    html += "<h2>Throughput: model x batch against precision x workers</h2>\n" + html_table(*page.throughput);
  }
  html += "<h2>Figures</h2>\n";
  for (const auto& [png, caption] : page.figures) {
    html += fmt::format(
        "<figure><img alt=\"{}\" src=\"data:image/png;base64,{}\"><figcaption>{}</figcaption></figure>\n",
        caption, base64(read_bytes(plots / png)), caption);
  }
  return html + "</body></html>\n";
}

}  // namespace dtrain::experiment
