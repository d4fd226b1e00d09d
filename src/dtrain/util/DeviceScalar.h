// A number a training step computed where it ran (a loss, on the GPU), read on the host only when
// someone asks for it.
//
// Note [Reading a step's figures]
// Reading a CUDA tensor on the host (.item(), .to(kCPU)) waits until the GPU has run every kernel
// queued before the read: a read inside each step keeps the CPU from queueing the next step while
// the GPU runs this one, and the GPU idles while the CPU queues. So a step's loss stays a device
// tensor: the trainer sums it (and the metric counts) on the device and reads the sums at the points
// where something is logged, evaluated or checkpointed, once per interval instead of once per step.
// A DeviceScalar converts to double where a number is needed, and that conversion is such a read; on
// the CPU it costs nothing. train.sync_every_step reads at every step (per-step times are then the
// device's, as with CUDA_LAUNCH_BLOCKING), and the figures are the same bit for bit: a float32 loss
// becomes a float64 exactly, and float64 sums add in the same order on either side.
#pragma once

#include <torch/types.h>

namespace dtrain::util {

class DeviceScalar {
 public:
  DeviceScalar() = default;
  // A value already on the host.
  DeviceScalar(double value) : value_(value) {}  // NOLINT(google-explicit-constructor): a number is one
  // A copy of a single-element tensor (a copy: the tensor may be a view of a buffer the next step
  // overwrites), read on first use.
  static DeviceScalar of(const torch::Tensor& value) {
    DeviceScalar scalar;
    scalar.tensor_ = value.detach().reshape({}).clone();
    scalar.read_ = false;
    return scalar;
  }

  // The value on the host (a device read the first time, for a tensor on a GPU).
  double value() const {
    if (!read_) {
      value_ = tensor_.item<double>();
      read_ = true;
    }
    return value_;
  }
  operator double() const { return value(); }  // NOLINT(google-explicit-constructor)

  // The value as a float64 tensor of no dimensions on the device it was computed on (a host value:
  // on the CPU), without reading it: what sums on the device add.
  torch::Tensor as_tensor() const {
    if (tensor_.defined()) return tensor_.to(torch::kDouble);
    return torch::tensor(value_, torch::kDouble);
  }
  // Whether it has not been read yet: then sums add it as a tensor where it lies (on the CPU too,
  // so that a CPU run takes the path a GPU run takes, and the tests see it).
  bool pending() const { return !read_; }

 private:
  torch::Tensor tensor_;
  mutable double value_ = 0.0;
  mutable bool read_ = true;
};

// A running sum of DeviceScalars that reads the device only when asked for it: values not yet read
// are added where they lie (in float64), and once such a sum has begun, host values join it too,
// so the additions keep their order and the sum is the same bit for bit either way.
class DeviceSum {
 public:
  void add(const DeviceScalar& x) {
    if (x.pending() || device_.defined()) {
      device_ = device_.defined() ? device_ + x.as_tensor() : x.as_tensor();
    } else {
      host_ += x.value();
    }
  }
  // The sum so far (a device read where part of it is there); the sum starts again from 0.
  double take() {
    double sum = host_;
    if (device_.defined()) sum += device_.item<double>();
    host_ = 0.0;
    device_ = torch::Tensor();
    return sum;
  }

 private:
  double host_ = 0.0;
  torch::Tensor device_;
};

}  // namespace dtrain::util
