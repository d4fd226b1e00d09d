#include "dtrain/experiment/Report.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/JsonFile.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct RunData {
  std::string name;
  json results;
  std::vector<json> metrics;  // metrics.jsonl, in order
};

std::vector<RunData> load_runs(const fs::path& dir) {
  std::vector<RunData> runs;
  auto add = [&](const std::string& name, const fs::path& run_dir) {
    RunData run;
    run.name = name;
    run.results = io::read_json_file(run_dir / "results.json");
    std::ifstream lines(run_dir / "metrics.jsonl");
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.empty()) run.metrics.push_back(json::parse(line));
    }
    runs.push_back(std::move(run));
  };
  if (fs::exists(dir / "experiment.yaml") && fs::exists(dir / "results.json")) {
    const auto experiment = io::read_json_file(dir / "results.json");
    for (const auto& entry : experiment.at("runs")) {
      const auto name = entry.at("name").get<std::string>();
      add(name, dir / name);
    }
  } else if (fs::exists(dir / "results.json")) {
    add(io::read_json_file(dir / "results.json").value("name", "run"), dir);
  } else {
    throw std::invalid_argument(
        fmt::format("report: {} holds no results.json; expected a run folder or a finished experiment folder",
                    dir.string()));
  }
  return runs;
}

// One data file per run and series: "x y" lines; returns false when the series is empty.
bool write_series(const fs::path& path, const RunData& run, const std::string& x_key,
                  const std::string& y_key) {
  std::ostringstream out;
  double t0 = -1;
  int n = 0;
  for (const auto& m : run.metrics) {
    if (!m.contains(y_key) || m[y_key].is_null()) continue;
    double x = 0;
    if (x_key == "wall_time") {
      if (t0 < 0) t0 = run.metrics.front().value("wall_time", 0.0);
      x = m.value("wall_time", 0.0) - t0;
    } else {
      x = m.value(x_key, 0.0);
    }
    out << x << " " << m[y_key].get<double>() << "\n";
    ++n;
  }
  io::write_file_atomic(path, out.str());
  return n > 0;
}

struct Curve {
  std::string file;
  std::string title;
  std::string style;
};

std::string plot_command(const std::string& png, const std::string& title, const std::string& xlabel,
                         const std::string& ylabel, const std::vector<Curve>& curves) {
  std::string s = fmt::format(
      "set output '{}'\nset title '{}'\nset xlabel '{}'\nset ylabel '{}'\nset key outside right top\n"
      "set grid\n",
      png, title, xlabel, ylabel);
  s += "plot ";
  for (std::size_t i = 0; i < curves.size(); ++i) {
    s += fmt::format("{}'{}' using 1:2 with {} lw 2 title '{}'", i ? ", " : "", curves[i].file,
                     curves[i].style, curves[i].title);
  }
  return s + "\n";
}

std::string base64(const std::string& bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += {table[v >> 18], table[(v >> 12) & 63], table[(v >> 6) & 63], table[v & 63]};
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += {table[v >> 18], table[(v >> 12) & 63], i + 1 < bytes.size() ? table[(v >> 6) & 63] : '=', '='};
  }
  return out;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Markdown table rows -> an HTML table.
std::string html_table(const std::vector<std::vector<std::string>>& rows) {
  std::string s = "<table>\n";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    s += "<tr>";
    for (const auto& cell : rows[r]) s += fmt::format(r == 0 ? "<th>{}</th>" : "<td>{}</td>", cell);
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string md_table(const std::vector<std::vector<std::string>>& rows) {
  std::string s;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    s += "|";
    for (const auto& cell : rows[r]) s += " " + cell + " |";
    s += "\n";
    if (r == 0) {
      s += "|";
      for (std::size_t c = 0; c < rows[r].size(); ++c) s += "---|";
      s += "\n";
    }
  }
  return s;
}

}  // namespace

fs::path write_report(const fs::path& dir, const ReportOptions& options) {
  const auto runs = load_runs(dir);
  const auto plots = dir / "plots";
  fs::create_directories(plots);

  // The run table, with scaling efficiency against the best one-worker throughput of the same model.
  std::map<std::string, double> one_worker;  // model -> samples/s
  for (const auto& run : runs) {
    if (run.results.value("world_size", 1) == 1) {
      auto& best = one_worker[run.results.value("model", "")];
      best = std::max(best, run.results.value("samples_per_second", 0.0));
    }
  }
  std::vector<std::vector<std::string>> table{{"run", "strategy", "backend", "workers", "model", "steps",
                                               "test top-1", "test top-5", "test loss", "samples/s",
                                               "scaling eff.", "comm MB/step", "wait ms/step"}};
  for (const auto& run : runs) {
    const auto& r = run.results;
    const int world = r.value("world_size", 1);
    const double sps = r.value("samples_per_second", 0.0);
    const auto steps = std::max<std::int64_t>(1, r.value("steps", std::int64_t{1}));
    const auto base = one_worker.find(r.value("model", ""));
    const std::string efficiency = base != one_worker.end() && base->second > 0
                                       ? fmt::format("{:.2f}", sps / (world * base->second))
                                       : "";
    const double bytes = r["comm"].contains("total") ? r["comm"]["total"].value("bytes", 0.0) : 0.0;
    table.push_back({run.name, r.value("strategy", ""), r.value("backend", ""), std::to_string(world),
                     r.value("model", ""), std::to_string(steps),
                     fmt::format("{:.4f}", r["final"].value("top1", 0.0)),
                     fmt::format("{:.4f}", r["final"].value("top5", 0.0)),
                     fmt::format("{:.4f}", r["final"].value("loss", 0.0)), fmt::format("{:.0f}", sps),
                     efficiency, fmt::format("{:.3f}", bytes / steps / 1e6),
                     fmt::format("{:.3f}", 1e3 * r.value("comm_wait_seconds", 0.0) / steps)});
  }

  // Sweep table (seed 003's form): rows model x batch, columns workers, cells samples/s.
  std::set<int> worlds;
  std::map<std::pair<std::string, int>, std::map<int, double>> cells;
  for (const auto& run : runs) {
    const auto& r = run.results;
    const int batch = r["config"]["data"].value("batch_size", 0);
    const int world = r.value("world_size", 1);
    worlds.insert(world);
    auto& cell = cells[{r.value("model", ""), batch}][world];
    cell = std::max(cell, r.value("samples_per_second", 0.0));
  }
  std::vector<std::vector<std::string>> sweep{{"model", "batch per worker"}};
  for (int w : worlds) sweep[0].push_back(fmt::format("{} worker{} (samples/s)", w, w == 1 ? "" : "s"));
  for (const auto& [key, by_world] : cells) {
    std::vector<std::string> row{key.first, std::to_string(key.second)};
    for (int w : worlds) {
      const auto it = by_world.find(w);
      row.push_back(it == by_world.end() ? "" : fmt::format("{:.0f}", it->second));
    }
    sweep.push_back(std::move(row));
  }

  // Learning curves and throughput, drawn by gnuplot.
  std::string script = "set terminal pngcairo size 960,540 noenhanced font ',11'\n";
  std::vector<Curve> loss, top1_step, top5_step, top1_time;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    auto file = [&](const std::string& what) {
      return (plots / fmt::format("run{}_{}.dat", i, what)).string();
    };
    if (write_series(file("train_loss"), run, "step", "train/loss"))
      loss.push_back({file("train_loss"), run.name + " train", "lines"});
    if (write_series(file("val_loss"), run, "step", "val/loss"))
      loss.push_back({file("val_loss"), run.name + " validation", "linespoints"});
    if (write_series(file("val_top1"), run, "step", "val/top1"))
      top1_step.push_back({file("val_top1"), run.name + " validation top-1", "linespoints"});
    if (write_series(file("train_top1"), run, "step", "train_epoch/top1"))
      top1_step.push_back({file("train_top1"), run.name + " train top-1", "lines"});
    if (write_series(file("val_top5"), run, "step", "val/top5"))
      top5_step.push_back({file("val_top5"), run.name + " validation top-5", "linespoints"});
    if (write_series(file("val_top1_time"), run, "wall_time", "val/top1"))
      top1_time.push_back({file("val_top1_time"), run.name, "linespoints"});
  }
  std::vector<std::pair<std::string, std::string>> figures;  // png, caption
  auto figure = [&](const std::string& png, const std::string& title, const std::string& xlabel,
                    const std::string& ylabel, const std::vector<Curve>& curves) {
    if (curves.empty()) return;
    script += plot_command((plots / png).string(), title, xlabel, ylabel, curves);
    figures.emplace_back(png, title);
  };
  figure("loss.png", "Loss against step", "optimizer step", "cross-entropy loss", loss);
  figure("top1.png", "Top-1 accuracy against step", "optimizer step", "top-1 accuracy", top1_step);
  figure("top5.png", "Top-5 accuracy against step", "optimizer step", "top-5 accuracy", top5_step);
  figure("top1_time.png", "Validation top-1 against wall time", "seconds since the first logged step",
         "top-1 accuracy", top1_time);
  if (worlds.size() > 1) {
    // Throughput against workers with the ideal line (N x one worker), per model.
    std::string data;
    std::vector<Curve> curves;
    int index = 0;
    for (const auto& [model, base] : one_worker) {
      std::ostringstream measured, ideal;
      std::map<int, double> best;
      for (const auto& run : runs) {
        if (run.results.value("model", "") != model) continue;
        auto& b = best[run.results.value("world_size", 1)];
        b = std::max(b, run.results.value("samples_per_second", 0.0));
      }
      for (const auto& [w, s] : best) {
        measured << w << " " << s << "\n";
        ideal << w << " " << w * base << "\n";
      }
      const auto m = (plots / fmt::format("throughput{}.dat", index)).string();
      const auto id = (plots / fmt::format("ideal{}.dat", index)).string();
      io::write_file_atomic(m, measured.str());
      io::write_file_atomic(id, ideal.str());
      curves.push_back({m, model + " measured", "linespoints"});
      curves.push_back({id, model + " ideal (N x 1 worker)", "lines dashtype 2"});
      ++index;
    }
    script += "set xtics 1\nset yrange [0:*]\n";
    figure("throughput.png", "Throughput against workers", "workers", "samples/s (whole job)", curves);
  }
  const auto script_path = plots / "plots.gp";
  io::write_file_atomic(script_path, script);
  const std::string command = fmt::format("{} '{}' 2>&1", options.gnuplot, script_path.string());
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("report: cannot start gnuplot");
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof buf, pipe)) output += buf;
  if (pclose(pipe) != 0) {
    throw std::runtime_error(
        fmt::format("report: gnuplot failed ({}); install gnuplot-nox. Output: {}", options.gnuplot, output));
  }

  // report.md and report.html.
  const auto title = fmt::format("dtrain report: {}", dir.filename().string());
  std::string md = "# " + title + "\n\n## Runs\n\n" + md_table(table);
  std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + title +
      "</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
      "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:4px 8px;"
      "text-align:right}th{background:#eee}img{max-width:100%}</style></head><body>\n<h1>" +
      title + "</h1>\n<h2>Runs</h2>\n" + html_table(table);
  if (sweep.size() > 2 || worlds.size() > 1) {
    md += "\n## Throughput: model x batch against workers\n\n" + md_table(sweep);
    html += "<h2>Throughput: model x batch against workers</h2>\n" + html_table(sweep);
  }
  md += "\n## Figures\n\n";
  html += "<h2>Figures</h2>\n";
  for (const auto& [png, caption] : figures) {
    md += fmt::format("![{}](plots/{})\n\n", caption, png);
    html += fmt::format(
        "<figure><img alt=\"{}\" src=\"data:image/png;base64,{}\"><figcaption>{}</figcaption></figure>\n",
        caption, base64(read_bytes(plots / png)), caption);
  }
  html += "</body></html>\n";
  io::write_file_atomic(dir / "report.md", md);
  io::write_file_atomic(dir / "report.html", html);
  return dir / "report.md";
}

}  // namespace dtrain::experiment
