// ProgressBar: rates, ETA and the choice between redrawing and plain lines.
#include "dtrain/io/ProgressBar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dtrain::io {
namespace {

std::string duration_text(double seconds) {
  const auto total = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  const long long h = total / 3600, m = (total / 60) % 60, s = total % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, s) : fmt::format("{}:{:02}", m, s);
}

}  // namespace

ProgressBar::ProgressBar(std::shared_ptr<Console> console, ProgressBarOptions options)
    : console_(std::move(console)), options_(std::move(options)) {
  start_ = options_.now();
  last_shown_ = start_;
}

ProgressBar::~ProgressBar() {
  if (console_ && !finished_) console_->clear_status();
}

std::string ProgressBar::render() const {
  const double elapsed = std::chrono::duration<double>(options_.now() - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(step_) / elapsed : 0.0;
  std::string text = options_.label;
  if (options_.total_steps > 0) {
    const double fraction = std::clamp(static_cast<double>(step_) / options_.total_steps, 0.0, 1.0);
    const int filled = static_cast<int>(fraction * options_.width);
    std::string bar(options_.width, ' ');
    std::fill(bar.begin(), bar.begin() + filled, '=');
    if (filled < options_.width && filled > 0) bar[filled] = '>';
    text += fmt::format(" [{}] {}/{}", bar, step_, options_.total_steps);
  } else {
    text += fmt::format(" step {}", step_);
  }
  text += fmt::format(" {:.1f} steps/s", rate);
  if (options_.total_steps > 0 && rate > 0) {
    text += " ETA " + duration_text(static_cast<double>(options_.total_steps - step_) / rate);
  }
  text += " elapsed " + duration_text(elapsed);
  text += fmt::format(" loss {:.4f}", loss_);
  return text;
}

void ProgressBar::update(std::int64_t step, double loss) {
  update(step, [loss] { return loss; });
}

void ProgressBar::update(std::int64_t step, std::function<double()> loss) {
  if (!console_ || finished_) return;
  step_ = step;
  loss_source_ = std::move(loss);
  const auto now = options_.now();
  const double since = std::chrono::duration<double>(now - last_shown_).count();
  const bool terminal = console_->is_terminal();
  if (terminal ? since < options_.redraw_interval_s && step != options_.total_steps
               : since < options_.plain_interval_s) {
    return;
  }
  loss_ = loss_source_();
  loss_source_ = nullptr;
  terminal ? console_->set_status(render()) : console_->write_line(render());
  last_shown_ = now;
}

void ProgressBar::finish() {
  if (!console_ || finished_) return;
  finished_ = true;
  if (loss_source_) loss_ = loss_source_();
  console_->clear_status();
  console_->write_line(render());
}

}  // namespace dtrain::io
