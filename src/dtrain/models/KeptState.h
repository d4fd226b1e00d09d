// What a forward run outside training may change, kept and put back: the default random generators'
// state and a module's buffers. Activation recomputation (models/Recompute.h) runs a block's forward
// twice, and the trainer's precision probe (parallel::check_precision_runs) once before training; both
// leave the run's draws and BatchNorm's statistics as if they had not run.
#pragma once

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/nn/module.h>

#include <mutex>
#include <utility>
#include <vector>

namespace dtrain::models {

// The default generators a forward on `device` may draw from: the CPU's always, and the device's GPU.
struct GeneratorStates {
  at::Tensor cpu;
  at::Tensor cuda;
  c10::DeviceIndex cuda_index = -1;

  static GeneratorStates now(const c10::Device& device) {
    GeneratorStates out;
    out.cpu = read(at::detail::getDefaultCPUGenerator());
    if (device.is_cuda()) {
      out.cuda_index = device.index();
      out.cuda = read(cuda_generator(out.cuda_index));
    }
    return out;
  }
  void restore() const {
    write(at::detail::getDefaultCPUGenerator(), cpu);
    if (cuda.defined()) write(cuda_generator(cuda_index), cuda);
  }

 private:
  static at::Tensor read(at::Generator generator) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }
  static void write(at::Generator generator, const at::Tensor& state) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
  static at::Generator cuda_generator(c10::DeviceIndex index) {
    return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, index));
  }
};

// A module's buffers (BatchNorm's running statistics and count) as they were, put back by restore().
class KeepBuffers {
 public:
  explicit KeepBuffers(const torch::nn::Module& module) {
    torch::NoGradGuard no_grad;
    for (const auto& buffer : module.buffers(/*recurse=*/true)) {
      if (buffer.defined()) kept_.emplace_back(buffer, buffer.clone());
    }
  }
  void restore() {
    torch::NoGradGuard no_grad;
    for (auto& [buffer, value] : kept_) buffer.copy_(value);
  }

 private:
  std::vector<std::pair<torch::Tensor, torch::Tensor>> kept_;
};

}  // namespace dtrain::models
