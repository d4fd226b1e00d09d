// The report's figures as one gnuplot script: which series each figure draws, in which style, and
// the data files they are read from (plots/run<i>_<series>.dat, throughput<i>.dat, comm_bytes.dat...).
#include "dtrain/experiment/ReportFigures.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <utility>

#include "dtrain/experiment/Gnuplot.h"
#include "dtrain/experiment/ReportSeries.h"
#include "dtrain/experiment/ReportTables.h"
#include "dtrain/io/AtomicFile.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;

// One learning-curve series of a run: metrics.jsonl's y_key against x_key.
struct CurveSpec {
  const char* series;  // the data file: run<i>_<series>.dat
  const char* x_key;
  const char* y_key;
  const char* title;  // after the run's name in the key
  const char* style;
};

struct LearningFigure {
  const char* png;
  const char* title;
  const char* xlabel;
  const char* ylabel;
  std::vector<CurveSpec> curves;  // drawn for every run
};

// The sixteen learning-curve series in nine figures, in three groups: against step, against
// epoch (the epoch-end records: train means over the epoch, validation after it), against time.
const char* const kSinceStart = "seconds since the first logged step";
const std::vector<LearningFigure> kByStep{
    {"loss.png",
     "Loss against step",
     "optimizer step",
     "loss",
     {{"train_loss", "step", "train/loss", " train", "lines"},
      {"val_loss", "step", "val/loss", " validation", "linespoints"}}},
    {"top1.png",
     "Top-1 accuracy against step",
     "optimizer step",
     "top-1 accuracy",
     {{"val_top1", "step", "val/top1", " validation", "linespoints"},
      {"train_top1", "step", "train_epoch/top1", " train (epoch mean)", "linespoints"}}},
    {"top5.png",
     "Top-5 accuracy against step",
     "optimizer step",
     "top-5 accuracy",
     {{"val_top5", "step", "val/top5", " validation", "linespoints"},
      {"train_top5", "step", "train_epoch/top5", " train (epoch mean)", "linespoints"}}}};
const std::vector<LearningFigure> kByEpoch{
    {"loss_epoch.png",
     "Loss against epoch",
     "epoch",
     "loss",
     {{"train_loss_epoch", "epoch", "train_epoch/loss", " train", "linespoints"},
      {"val_loss_epoch", "epoch", "val/loss", " validation", "linespoints"}}},
    {"top1_epoch.png",
     "Top-1 accuracy against epoch",
     "epoch",
     "top-1 accuracy",
     {{"train_top1_epoch", "epoch", "train_epoch/top1", " train", "linespoints"},
      {"val_top1_epoch", "epoch", "val/top1", " validation", "linespoints"}}},
    {"top5_epoch.png",
     "Top-5 accuracy against epoch",
     "epoch",
     "top-5 accuracy",
     {{"train_top5_epoch", "epoch", "train_epoch/top5", " train", "linespoints"},
      {"val_top5_epoch", "epoch", "val/top5", " validation", "linespoints"}}}};
const std::vector<LearningFigure> kByTime{
    {"loss_time.png",
     "Loss against wall time",
     kSinceStart,
     "loss",
     {{"train_loss_time", "wall_time", "train/loss", " train", "lines"},
      {"val_loss_time", "wall_time", "val/loss", " validation", "linespoints"}}},
    {"top1_time.png",
     "Validation top-1 against wall time",
     kSinceStart,
     "top-1 accuracy",
     {{"val_top1_time", "wall_time", "val/top1", "", "linespoints"}}},
    {"top5_time.png",
     "Validation top-5 against wall time",
     kSinceStart,
     "top-5 accuracy",
     {{"val_top5_time", "wall_time", "val/top5", "", "linespoints"}}}};

// The decentralized strategy's figures (DiNNO's): one line per run, each the mean over nodes of a
// per-node series, against rounds and against the bytes each node sent.
struct NodeSeries {
  const char* series;  // the data file run<i>_<series><axis>.dat and the figure <series><axis>.png
  const char* prefix;  // the per-node key is <prefix><i><suffix>
  const char* suffix;
  const char* what;  // the figure's title, before " against ..."
  const char* ylabel;
};

struct NodeAxis {
  const char* x_key;
  const char* file_suffix;
  const char* against;
  const char* xlabel;
};

const std::vector<NodeSeries> kNodeSeries{
    {"node_loss", "val/node", "/loss", "Validation loss (mean over nodes)", "validation loss"},
    {"node_top1", "val/node", "/top1", "Top-1 accuracy (mean over nodes)", "top-1 accuracy"},
    {"consensus_error", "strategy/consensus/node", "", "strategy/consensus_error (mean over nodes)",
     "mean distance to the other nodes"}};
const std::vector<NodeAxis> kNodeAxes{
    {"step", "", "round", "communication round (step)"},
    {"strategy/node_bytes_sent", "_bytes", "bytes sent", "bytes sent per node (mean over nodes)"}};

// "x y" lines.
std::string points_text(const std::vector<Point>& points) {
  std::ostringstream out;
  for (const auto& p : points) out << p.x << " " << p.y << "\n";
  return out.str();
}

// The script as it grows, and the figures it draws.
class ScriptWriter {
 public:
  explicit ScriptWriter(fs::path plots) : plots_(std::move(plots)) {}

  void add(const std::string& commands) { script_ += commands; }

  // Writes <plots>/<name>; returns its path for the script.
  std::string data(const std::string& name, const std::string& text) const {
    const auto path = (plots_ / name).string();
    io::write_file_atomic(path, text);
    return path;
  }

  // A figure of `curves`; none when there are no curves.
  void figure(const std::string& png, const std::string& title, const std::string& xlabel,
              const std::string& ylabel, const std::vector<Curve>& curves) {
    if (curves.empty()) return;
    add(plot_command(png_path(png), title, xlabel, ylabel, curves));
    figures_.push_back({png, title});
  }

  // A figure whose commands the caller wrote (they set the output to png_path(png)).
  void figure_commands(const std::string& png, const std::string& title, const std::string& commands) {
    add(commands);
    figures_.push_back({png, title});
  }

  std::string png_path(const std::string& png) const { return (plots_ / png).string(); }

  PlotScript finish() const {
    const auto path = plots_ / "plots.gp";
    io::write_file_atomic(path, script_);
    return {path, figures_};
  }

 private:
  fs::path plots_;
  std::string script_ = "set terminal pngcairo size 960,540 noenhanced font ',11'\n";
  std::vector<Figure> figures_;
};

// Every run's curves of one figure; a run's series is written even when it has no point, and
// drawn only when it has.
void learning_figure(ScriptWriter& writer, const std::vector<ReportRun>& runs, const LearningFigure& figure) {
  std::vector<Curve> curves;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (const auto& c : figure.curves) {
      const auto points = learning_curve(runs[i], c.x_key, c.y_key);
      const auto file = writer.data(fmt::format("run{}_{}.dat", i, c.series), points_text(points));
      if (!points.empty()) curves.push_back({file, runs[i].name + c.title, c.style});
    }
  }
  writer.figure(figure.png, figure.title, figure.xlabel, figure.ylabel, curves);
}

void learning_figures(ScriptWriter& writer, const std::vector<ReportRun>& runs) {
  for (const auto& figure : kByStep) learning_figure(writer, runs, figure);
  // Epochs are whole numbers: about ten integer tics whatever the length of the run.
  int epochs = 1;
  for (const auto& run : runs) epochs = std::max(epochs, run.results.epochs);
  writer.add(fmt::format("set xtics {}\n", std::max(1, epochs / 10)));
  for (const auto& figure : kByEpoch) learning_figure(writer, runs, figure);
  writer.add("set xtics autofreq\n");
  for (const auto& figure : kByTime) learning_figure(writer, runs, figure);
}

void node_figures(ScriptWriter& writer, const std::vector<ReportRun>& runs) {
  for (const auto& axis : kNodeAxes) {
    for (const auto& s : kNodeSeries) {
      std::vector<Curve> curves;
      for (std::size_t i = 0; i < runs.size(); ++i) {
        const auto points = node_mean_curve(runs[i], axis.x_key, s.prefix, s.suffix);
        if (points.empty()) continue;
        const auto file =
            writer.data(fmt::format("run{}_{}{}.dat", i, s.series, axis.file_suffix), points_text(points));
        curves.push_back({file, runs[i].name, "linespoints"});
      }
      writer.figure(std::string(s.series) + axis.file_suffix + ".png",
                    std::string(s.what) + " against " + axis.against, axis.xlabel, s.ylabel, curves);
    }
  }
}

// "workers samples/s "efficiency"" lines: the efficiency is drawn as a label at the point.
std::string throughput_text(const ScalingSeries& s) {
  std::ostringstream out;
  for (std::size_t i = 0; i < s.throughput.size(); ++i) {
    out << s.throughput[i].x << " " << s.throughput[i].y << " \"" << fmt::format("{:.2f}", s.efficiency[i])
        << "\"\n";
  }
  return out.str();
}

// Throughput and training time against workers, per series (model and kind), with the ideal lines (N x one
// worker's throughput, one worker's time / N); the measured points carry their scaling efficiency.
void scaling_figures(ScriptWriter& writer, const std::vector<ReportRun>& runs) {
  std::vector<Curve> throughput, time;
  const auto all = scaling_series(runs);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& s = all[i];
    const auto measured = writer.data(fmt::format("throughput{}.dat", i), throughput_text(s));
    throughput.push_back({measured, s.key + " measured", "linespoints"});
    throughput.push_back({writer.data(fmt::format("ideal{}.dat", i), points_text(s.ideal)),
                          s.key + " ideal (N x 1 worker)", "lines dashtype 2"});
    throughput.push_back({measured, s.key + " scaling efficiency", "labels offset 0,1.2 notitle"});
    if (!s.time.empty()) {
      time.push_back({writer.data(fmt::format("time{}.dat", i), points_text(s.time)), s.key + " measured",
                      "linespoints"});
    }
    if (!s.ideal_time.empty()) {
      time.push_back({writer.data(fmt::format("ideal_time{}.dat", i), points_text(s.ideal_time)),
                      s.key + " ideal (1 worker / N)", "lines dashtype 2"});
    }
  }
  writer.add("set xtics 1\nset yrange [0:*]\n");
  writer.figure("throughput.png", "Throughput against workers (labels: scaling efficiency)", "workers",
                "samples/s (whole job)", throughput);
  writer.figure("training_time.png", "Training time against workers", "workers",
                "training seconds (no evaluation)", time);
  writer.add("set xtics autofreq\nset autoscale y\n");
}

// Communication per step by run: bytes each rank hands to collectives, and the step's communication
// phase (step_time.comm_s), named as the run table's "comm ms/step".
void comm_figures(ScriptWriter& writer, const std::vector<ReportRun>& runs) {
  std::ostringstream bytes, wait;
  for (const auto& bar : comm_bars(runs)) {
    bytes << "\"" << bar.label << "\" " << bar.mb_per_step << "\n";
    wait << "\"" << bar.label << "\" " << bar.wait_ms_per_step << "\n";
  }
  const auto& q = gnuplot_quoted;
  const auto bytes_path = writer.data("comm_bytes.dat", bytes.str());
  const auto wait_path = writer.data("comm_wait.dat", wait.str());
  writer.add("set style fill solid 0.6\nset boxwidth 0.6\nset yrange [0:*]\nset xtics rotate by -30\n");
  const std::string bytes_title = "Communication per step by run (strategy)";
  writer.figure_commands("comm_bytes.png", bytes_title,
                         fmt::format("set output '{}'\nset title '{}'\nset xlabel ''\n"
                                     "set ylabel 'MB per step per rank'\nset key off\nset grid y\n"
                                     "plot '{}' using 0:2:xtic(1) with boxes lc rgb '#4477aa'\n",
                                     q(writer.png_path("comm_bytes.png")), bytes_title, q(bytes_path)));
  const std::string wait_title = "Communication phase of the step by run (strategy): comm ms/step";
  writer.figure_commands(
      "comm_wait.png", wait_title,
      fmt::format("set output '{}'\nset title '{}'\n"
                  "set ylabel 'comm ms per step'\nplot '{}' using 0:2:xtic(1) with boxes lc rgb "
                  "'#cc6677'\n",
                  q(writer.png_path("comm_wait.png")), wait_title, q(wait_path)));
}

}  // namespace

PlotScript write_plot_script(const std::vector<ReportRun>& runs, const fs::path& plots) {
  ScriptWriter writer(plots);
  learning_figures(writer, runs);
  if (has_node_metrics(runs)) node_figures(writer, runs);
  if (worker_counts(runs).size() > 1) scaling_figures(writer, runs);
  const bool communicates =
      std::any_of(runs.begin(), runs.end(), [](const ReportRun& r) { return r.results.world_size > 1; });
  if (communicates) comm_figures(writer, runs);
  return writer.finish();
}

std::vector<Figure> draw_figures(const std::vector<ReportRun>& runs, const fs::path& plots,
                                 const std::string& gnuplot) {
  auto script = write_plot_script(runs, plots);
  run_gnuplot(script.path, gnuplot);
  return std::move(script.figures);
}

}  // namespace dtrain::experiment
