// The flat buffers DataParallel all-reduces: trainable parameters grouped, in reverse
// registration order, into buckets of at most bucket_mb per dtype and device, each parameter's
// grad() an alias of its slot (Note [Gradients as bucket views] in DataParallel.cpp). Internal to
// the data_parallel strategy.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/Work.h"
#include "dtrain/parallel/GradientReadyHook.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"

namespace dtrain::parallel::detail {

// The dtype a 16-bit wire carries (fp16 or bf16; an internal assert for any other), for the buckets
// and for PowerSGD's factors.
torch::ScalarType wire_dtype(GradCompression wire);

struct ParamSlot {
  std::string name;
  torch::Tensor param;
  int bucket = 0;
  std::int64_t offset = 0;  // elements into the bucket's buffer
  torch::Tensor view;       // the slot, shaped like the parameter
  bool ready = false;       // got its gradient in the current synchronised backward
  AccumulatorPtr accumulator;
  std::uintptr_t hook_key = 0;
};

struct Bucket {
  torch::Tensor buffer;  // flat, the parameters' dtype and device (the last bucket: + carry slots)
  torch::Tensor grads;   // the gradients' part of buffer
  torch::Tensor wire;    // the 16-bit copy that is all-reduced, or undefined
  std::vector<int> params;
  int pending = 0;  // parameters still without a gradient in this backward
  comm::WorkPtr work;
};

struct BucketLayout {
  std::vector<ParamSlot> params;
  std::vector<Bucket> buckets;  // in launch order
  // Values carried along with the gradients: slots behind the last bucket's gradients when that
  // bucket is float32 and uncompressed (carry_inline), else a buffer of their own.
  torch::Tensor carry_slots;
  bool carry_inline = false;
};

// Lays out `module`'s trainable parameters, except options.exclude, in buckets of at most
// options.bucket_mb megabytes and points every parameter's grad() into its bucket (a gradient
// already present is copied in). With fp16 or bf16 on the wire (compression, or PowerSGD's wire
// for its plain rounds), each bucket gets a 16-bit wire copy.
BucketLayout build_buckets(const torch::nn::Module& module, const DataParallelOptions& options,
                           std::int64_t carry_slots);

// A tensor over `numel(sizes)` elements of `buffer` from `offset`, sharing its storage without
// being an autograd view: LibTorch's Optimizer::zero_grad() calls grad.detach_(), which autograd
// refuses on views. `strides`: the alias's (a dense layout over exactly those elements); empty:
// contiguous.
torch::Tensor storage_alias(const torch::Tensor& buffer, std::int64_t offset, torch::IntArrayRef sizes,
                            torch::IntArrayRef strides = {});
// Whether `grad` is exactly the slot `view` (same memory, shape and strides).
bool is_view_of(const torch::Tensor& grad, const torch::Tensor& view);

}  // namespace dtrain::parallel::detail
