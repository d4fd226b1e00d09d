// Reports: report.md and a self-contained report.html (PNG plots embedded) for a run folder or an
// experiment folder, with learning curves (train and validation loss, top-1 and top-5 against step,
// epoch and wall time), throughput and training time against workers with the ideal lines and the
// scaling efficiency, communication bytes and time (the step's communication phase) per step by run, a
// table of every run (accuracy, throughput, scaling efficiency, communication per step) and, for sweeps, a
// throughput table of model x batch against workers. Plots are drawn by gnuplot.
//
// The pieces: ReportRuns.h reads the runs, ReportTables.h and ReportSeries.h compute what is shown,
// ReportFigures.h draws the figures with gnuplot (Gnuplot.h), ReportPage.h writes the pages.
#pragma once

#include <filesystem>
#include <string>

#include "dtrain/experiment/Gnuplot.h"  // run_gnuplot, which the bench command's plots use too

namespace dtrain::experiment {

struct ReportOptions {
  std::string gnuplot = "gnuplot";  // the program that draws the PNG plots
};

// Writes <dir>/report.md, <dir>/report.html and <dir>/plots/*.png; returns report.md's path.
// Throws std::invalid_argument when dir holds neither a run (results.json) nor an experiment, and
// std::runtime_error naming the file when a run's results.json or metrics.jsonl cannot be read.
std::filesystem::path write_report(const std::filesystem::path& dir, const ReportOptions& options = {});

}  // namespace dtrain::experiment
