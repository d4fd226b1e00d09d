// gnuplot as dtrain drives it: one script of plot commands that draws PNGs from whitespace-separated
// data files, run once. Used by the report and by the bench command's plots.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace dtrain::experiment {

// One curve of a plot: a data file drawn with a style ("lines", "linespoints", ...). A style that
// starts with "labels" draws the file's third column as text at the points, without a key entry.
struct Curve {
  std::string file;
  std::string title;
  std::string style;
};

// `text` for a single-quoted gnuplot string: a quote inside is doubled.
std::string gnuplot_quoted(const std::string& text);

// The commands that draw `curves` into `png`, with a title, axis labels, a key and a grid.
std::string plot_command(const std::string& png, const std::string& title, const std::string& xlabel,
                         const std::string& ylabel, const std::vector<Curve>& curves);

// Runs gnuplot on a script; throws std::runtime_error with gnuplot's output when it fails.
void run_gnuplot(const std::filesystem::path& script, const std::string& gnuplot = "gnuplot");

}  // namespace dtrain::experiment
