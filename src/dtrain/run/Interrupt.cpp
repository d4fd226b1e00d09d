// See Interrupt.h, Note [Stopping on a signal].
#include "dtrain/run/Interrupt.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <csignal>
#include <iterator>
#include <mutex>

#include "dtrain/launch/Signals.h"
#include "dtrain/train/Trainer.h"

namespace dtrain::run {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
volatile std::sig_atomic_t g_received = 0;

// Runs of one process (ranks as threads, each calling run::train) share the handlers: the first
// installs them, the last puts back what was there before.
std::mutex g_mutex;
int g_installed = 0;
struct sigaction g_previous[std::size(kSignals)];

extern "C" void record_signal(int signo) {
  g_received = signo;
}

}  // namespace

InterruptHandlers::InterruptHandlers() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (g_installed++ > 0) return;
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &action, &g_previous[i]);
}

InterruptHandlers::~InterruptHandlers() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_installed > 0) return;
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

int InterruptHandlers::received() {
  return g_received;
}

void StopOnInterrupt::on_step_end(train::Trainer& trainer, const train::StepEvent& event) {
  const auto& comm = trainer.communicator();
  const bool several = comm && comm->size() > 1;
  if (several && event.step % every_ != 0) return;
  int signo = InterruptHandlers::received();
  if (several) {
    auto agreed = torch::tensor({static_cast<double>(signo)}, torch::kDouble);
    comm->allreduce(agreed, comm::ReduceOp::Max);
    signo = static_cast<int>(agreed.item<double>());
  }
  if (signo == 0 || signal_ != 0) return;
  signal_ = signo;
  trainer.request_stop(fmt::format("interrupted by {} at step {}", launch::signal_name(signo), event.step));
}

}  // namespace dtrain::run
