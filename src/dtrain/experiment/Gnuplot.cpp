// gnuplot's script syntax for the plots dtrain draws, and running gnuplot on a script.
#include "dtrain/experiment/Gnuplot.h"

#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>

namespace dtrain::experiment {

std::string gnuplot_quoted(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out;
}

std::string plot_command(const std::string& png, const std::string& title, const std::string& xlabel,
                         const std::string& ylabel, const std::vector<Curve>& curves) {
  const auto& q = gnuplot_quoted;
  std::string s = fmt::format(
      "set output '{}'\nset title '{}'\nset xlabel '{}'\nset ylabel '{}'\nset key outside right top\n"
      "set grid\n",
      q(png), q(title), q(xlabel), q(ylabel));
  s += "plot ";
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const auto& c = curves[i];
    if (c.style.rfind("labels", 0) == 0) {  // text at the points: the data file's third column
      s += fmt::format("{}'{}' using 1:2:3 with {}", i ? ", " : "", q(c.file), c.style);
    } else {
      s += fmt::format("{}'{}' using 1:2 with {} lw 2 title '{}'", i ? ", " : "", q(c.file), c.style,
                       q(c.title));
    }
  }
  return s + "\n";
}

void run_gnuplot(const std::filesystem::path& script, const std::string& gnuplot) {
  const std::string command = fmt::format("{} '{}' 2>&1", gnuplot, script.string());
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot start gnuplot (" + gnuplot + ")");
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof buf, pipe)) output += buf;
  if (pclose(pipe) != 0) {
    throw std::runtime_error(fmt::format("gnuplot failed on {} ({}); install gnuplot-nox. Output: {}",
                                         script.string(), gnuplot, output));
  }
}

}  // namespace dtrain::experiment
