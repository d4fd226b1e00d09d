// The report's figures: learning curves against step, epoch and wall time for every run; for runs
// of the decentralized strategy, the mean over nodes of validation loss, top-1 and consensus error
// against rounds and against bytes sent (DiNNO's comparison of algorithms);
// throughput and training time against workers with the ideal lines, when the runs have several
// worker counts; communication per step by run, when a run has more than one worker. The series are
// written as gnuplot data files beside one script that draws every figure as a PNG.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "dtrain/experiment/ReportRuns.h"

namespace dtrain::experiment {

struct Figure {
  std::string png;      // the file's name in the plots folder
  std::string caption;  // the plot's title
};

struct PlotScript {
  std::filesystem::path path;   // <plots>/plots.gp
  std::vector<Figure> figures;  // the figures it draws, in report order
};

// Writes the runs' series (<plots>/*.dat) and the script that draws them (<plots>/plots.gp). A
// figure none of whose series has a point is left out.
PlotScript write_plot_script(const std::vector<ReportRun>& runs, const std::filesystem::path& plots);

// write_plot_script, then gnuplot on the script; returns the figures drawn, in report order.
std::vector<Figure> draw_figures(const std::vector<ReportRun>& runs, const std::filesystem::path& plots,
                                 const std::string& gnuplot = "gnuplot");

}  // namespace dtrain::experiment
