// See Interrupt.h, Note [Stopping on a signal].
#include "dtrain/cli/Interrupt.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <csignal>

#include "dtrain/launch/Signals.h"
#include "dtrain/train/Trainer.h"

namespace dtrain::cli {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
volatile std::sig_atomic_t g_received = 0;

extern "C" void record_signal(int signo) {
  g_received = signo;
}

}  // namespace

InterruptHandlers::InterruptHandlers() {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &action, &previous_[i]);
}

InterruptHandlers::~InterruptHandlers() {
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
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

}  // namespace dtrain::cli
