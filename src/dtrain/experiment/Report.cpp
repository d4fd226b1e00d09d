// write_report: reads the runs, draws the figures, and writes report.md and report.html from the
// same page. Nothing is written before the runs have been read.
#include "dtrain/experiment/Report.h"

#include <fmt/format.h>

#include "dtrain/experiment/ReportFigures.h"
#include "dtrain/experiment/ReportPage.h"
#include "dtrain/experiment/ReportRuns.h"
#include "dtrain/experiment/ReportTables.h"
#include "dtrain/io/AtomicFile.h"

namespace dtrain::experiment {

namespace fs = std::filesystem;

fs::path write_report(const fs::path& dir, const ReportOptions& options) {
  const auto runs = read_report_runs(dir);
  const auto plots = dir / "plots";
  fs::create_directories(plots);
  ReportPage page;
  page.title = fmt::format("dtrain report: {}", dir.filename().string());
  page.runs = run_table(runs);
  page.warnings = scaling_warnings(runs);
  if (shows_step_table(runs)) page.steps = step_table(runs);
  if (shows_throughput_table(runs)) page.throughput = throughput_table(runs);
  page.figures = draw_figures(runs, plots, options.gnuplot);
  io::write_file_atomic(dir / "report.md", markdown_page(page));
  io::write_file_atomic(dir / "report.html", html_page(page, plots));
  return dir / "report.md";
}

}  // namespace dtrain::experiment
