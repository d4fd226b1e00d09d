#include "dtrain/experiment/Report.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "dtrain/experiment/Gnuplot.h"
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

  // Sweep table (seed 003's form): rows model x batch, columns precision x workers, cells samples/s.
  std::set<int> worlds;
  using Column = std::pair<std::string, int>;  // (precision, workers)
  std::set<Column> columns;
  std::map<std::pair<std::string, int>, std::map<Column, double>> cells;
  for (const auto& run : runs) {
    const auto& r = run.results;
    const int batch = r["config"]["data"].value("batch_size", 0);
    const int world = r.value("world_size", 1);
    const Column column{r.value("precision", "fp32"), world};
    worlds.insert(world);
    columns.insert(column);
    auto& cell = cells[{r.value("model", ""), batch}][column];
    cell = std::max(cell, r.value("samples_per_second", 0.0));
  }
  std::vector<std::vector<std::string>> sweep{{"model", "batch per worker"}};
  for (const auto& [precision, w] : columns) {
    sweep[0].push_back(fmt::format("{}, {} worker{} (samples/s)", precision, w, w == 1 ? "" : "s"));
  }
  for (const auto& [key, by_column] : cells) {
    std::vector<std::string> row{key.first, std::to_string(key.second)};
    for (const auto& column : columns) {
      const auto it = by_column.find(column);
      row.push_back(it == by_column.end() ? "" : fmt::format("{:.0f}", it->second));
    }
    sweep.push_back(std::move(row));
  }

  // Learning curves and throughput, drawn by gnuplot.
  std::string script = "set terminal pngcairo size 960,540 noenhanced font ',11'\n";
  std::vector<Curve> loss, top1_step, top5_step, top1_time, loss_epoch, top1_epoch, top5_epoch, loss_time,
      top5_time;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    auto file = [&](const std::string& what) {
      return (plots / fmt::format("run{}_{}.dat", i, what)).string();
    };
    // One series: written and added to `curves` when the run logged it.
    auto series = [&](std::vector<Curve>& curves, const std::string& what, const std::string& x_key,
                      const std::string& y_key, const std::string& title, const char* style) {
      if (write_series(file(what), run, x_key, y_key))
        curves.push_back({file(what), run.name + title, style});
    };
    series(loss, "train_loss", "step", "train/loss", " train", "lines");
    series(loss, "val_loss", "step", "val/loss", " validation", "linespoints");
    series(top1_step, "val_top1", "step", "val/top1", " validation", "linespoints");
    series(top1_step, "train_top1", "step", "train_epoch/top1", " train (epoch mean)", "linespoints");
    series(top5_step, "val_top5", "step", "val/top5", " validation", "linespoints");
    series(top5_step, "train_top5", "step", "train_epoch/top5", " train (epoch mean)", "linespoints");
    series(top1_time, "val_top1_time", "wall_time", "val/top1", "", "linespoints");
    series(top5_time, "val_top5_time", "wall_time", "val/top5", "", "linespoints");
    series(loss_time, "train_loss_time", "wall_time", "train/loss", " train", "lines");
    series(loss_time, "val_loss_time", "wall_time", "val/loss", " validation", "linespoints");
    // Against epoch: the epoch-end records (train means over the epoch, validation after it).
    series(loss_epoch, "train_loss_epoch", "epoch", "train_epoch/loss", " train", "linespoints");
    series(loss_epoch, "val_loss_epoch", "epoch", "val/loss", " validation", "linespoints");
    series(top1_epoch, "train_top1_epoch", "epoch", "train_epoch/top1", " train", "linespoints");
    series(top1_epoch, "val_top1_epoch", "epoch", "val/top1", " validation", "linespoints");
    series(top5_epoch, "train_top5_epoch", "epoch", "train_epoch/top5", " train", "linespoints");
    series(top5_epoch, "val_top5_epoch", "epoch", "val/top5", " validation", "linespoints");
  }
  std::vector<std::pair<std::string, std::string>> figures;  // png, caption
  auto figure = [&](const std::string& png, const std::string& title, const std::string& xlabel,
                    const std::string& ylabel, const std::vector<Curve>& curves) {
    if (curves.empty()) return;
    script += plot_command((plots / png).string(), title, xlabel, ylabel, curves);
    figures.emplace_back(png, title);
  };
  figure("loss.png", "Loss against step", "optimizer step", "loss", loss);
  figure("top1.png", "Top-1 accuracy against step", "optimizer step", "top-1 accuracy", top1_step);
  figure("top5.png", "Top-5 accuracy against step", "optimizer step", "top-5 accuracy", top5_step);
  // Epochs are whole numbers: about ten integer tics whatever the length of the run.
  int epochs = 1;
  for (const auto& run : runs) epochs = std::max(epochs, run.results.value("epochs", 1));
  script += fmt::format("set xtics {}\n", std::max(1, epochs / 10));
  figure("loss_epoch.png", "Loss against epoch", "epoch", "loss", loss_epoch);
  figure("top1_epoch.png", "Top-1 accuracy against epoch", "epoch", "top-1 accuracy", top1_epoch);
  figure("top5_epoch.png", "Top-5 accuracy against epoch", "epoch", "top-5 accuracy", top5_epoch);
  script += "set xtics autofreq\n";
  figure("loss_time.png", "Loss against wall time", "seconds since the first logged step", "loss", loss_time);
  figure("top1_time.png", "Validation top-1 against wall time", "seconds since the first logged step",
         "top-1 accuracy", top1_time);
  figure("top5_time.png", "Validation top-5 against wall time", "seconds since the first logged step",
         "top-5 accuracy", top5_time);
  if (worlds.size() > 1) {
    // Throughput and training time against workers, per model, with the ideal lines (N x one
    // worker's throughput, one worker's time / N); the measured points carry their scaling efficiency.
    std::vector<Curve> throughput, time;
    int index = 0;
    for (const auto& [model, base] : one_worker) {
      std::map<int, double> best_rate, best_time;
      for (const auto& run : runs) {
        if (run.results.value("model", "") != model) continue;
        const int w = run.results.value("world_size", 1);
        auto& rate = best_rate[w];
        rate = std::max(rate, run.results.value("samples_per_second", 0.0));
        const double t = run.results.value("train_seconds", 0.0);
        auto it = best_time.find(w);
        if (t > 0 && (it == best_time.end() || t < it->second)) best_time[w] = t;
      }
      std::ostringstream measured, ideal, measured_time, ideal_time;
      const double base_time = best_time.count(1) ? best_time[1] : 0.0;
      for (const auto& [w, rate] : best_rate) {
        measured << w << " " << rate << " \"" << fmt::format("{:.2f}", base > 0 ? rate / (w * base) : 0.0)
                 << "\"\n";
        ideal << w << " " << w * base << "\n";
      }
      for (const auto& [w, t] : best_time) {
        measured_time << w << " " << t << "\n";
        if (base_time > 0) ideal_time << w << " " << base_time / w << "\n";
      }
      auto data = [&](const std::string& what, const std::ostringstream& text) {
        const auto path = (plots / fmt::format("{}{}.dat", what, index)).string();
        io::write_file_atomic(path, text.str());
        return path;
      };
      const auto m = data("throughput", measured);
      throughput.push_back({m, model + " measured", "linespoints"});
      throughput.push_back({data("ideal", ideal), model + " ideal (N x 1 worker)", "lines dashtype 2"});
      throughput.push_back({m, model + " scaling efficiency", "labels offset 0,1.2 notitle"});
      if (!best_time.empty()) {
        time.push_back({data("time", measured_time), model + " measured", "linespoints"});
        if (base_time > 0)
          time.push_back(
              {data("ideal_time", ideal_time), model + " ideal (1 worker / N)", "lines dashtype 2"});
      }
      ++index;
    }
    script += "set xtics 1\nset yrange [0:*]\n";
    figure("throughput.png", "Throughput against workers (labels: scaling efficiency)", "workers",
           "samples/s (whole job)", throughput);
    figure("training_time.png", "Training time against workers", "workers",
           "training seconds (no evaluation)", time);
    script += "set xtics autofreq\nset autoscale y\n";
  }
  // Communication per step by run: bytes each rank hands to collectives, and time blocked on them.
  if (std::any_of(runs.begin(), runs.end(),
                  [](const RunData& r) { return r.results.value("world_size", 1) > 1; })) {
    std::ostringstream bytes, wait;
    for (const auto& run : runs) {
      const auto& r = run.results;
      const auto steps = std::max<std::int64_t>(1, r.value("steps", std::int64_t{1}));
      const double total = r["comm"].contains("total") ? r["comm"]["total"].value("bytes", 0.0) : 0.0;
      const auto label = fmt::format("\"{} ({})\"", run.name, r.value("strategy", ""));
      bytes << label << " " << total / steps / 1e6 << "\n";
      wait << label << " " << 1e3 * r.value("comm_wait_seconds", 0.0) / steps << "\n";
    }
    const auto bytes_path = (plots / "comm_bytes.dat").string();
    const auto wait_path = (plots / "comm_wait.dat").string();
    io::write_file_atomic(bytes_path, bytes.str());
    io::write_file_atomic(wait_path, wait.str());
    script += "set style fill solid 0.6\nset boxwidth 0.6\nset yrange [0:*]\nset xtics rotate by -30\n";
    script += fmt::format(
        "set output '{}'\nset title 'Communication per step by run (strategy)'\nset xlabel ''\n"
        "set ylabel 'MB per step per rank'\nset key off\nset grid y\n"
        "plot '{}' using 0:2:xtic(1) with boxes lc rgb '#4477aa'\n",
        (plots / "comm_bytes.png").string(), bytes_path);
    figures.emplace_back("comm_bytes.png", "Communication per step by run (strategy)");
    script += fmt::format(
        "set output '{}'\nset title 'Waiting for communication per step by run (strategy)'\n"
        "set ylabel 'ms per step'\nplot '{}' using 0:2:xtic(1) with boxes lc rgb '#cc6677'\n",
        (plots / "comm_wait.png").string(), wait_path);
    figures.emplace_back("comm_wait.png", "Waiting for communication per step by run (strategy)");
  }
  const auto script_path = plots / "plots.gp";
  io::write_file_atomic(script_path, script);
  run_gnuplot(script_path, options.gnuplot);

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
    md += "\n## Throughput: model x batch against precision x workers\n\n" + md_table(sweep);
    html += "<h2>Throughput: model x batch against precision x workers</h2>\n" + html_table(sweep);
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
