// Reports: report.md and a self-contained report.html (PNG plots embedded) for a run folder or an
// experiment folder, with learning curves (loss, top-1/top-5 against step and wall time), a table
// of every run (accuracy, throughput, scaling efficiency, communication per step) and, for sweeps,
// a throughput table of model x batch against workers. Plots are drawn by gnuplot.
#pragma once

#include <filesystem>
#include <string>

namespace dtrain::experiment {

struct ReportOptions {
  std::string gnuplot = "gnuplot";  // the program that draws the PNG plots
};

// Writes <dir>/report.md, <dir>/report.html and <dir>/plots/*.png; returns report.md's path.
// Throws std::invalid_argument when dir holds neither a run (results.json) nor an experiment.
std::filesystem::path write_report(const std::filesystem::path& dir, const ReportOptions& options = {});

}  // namespace dtrain::experiment
