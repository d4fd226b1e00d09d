// Bucket layout for DataParallel; see GradientBuckets.h.
#include "dtrain/parallel/data_parallel/GradientBuckets.h"

#include <c10/util/strides.h>

namespace dtrain::parallel::detail {
namespace {

// How the buckets travel when they are all-reduced plainly: PowerSGD's plain rounds use its wire.
GradCompression plain_wire(const DataParallelOptions& options) {
  return options.compression == GradCompression::PowerSgd ? options.powersgd.wire : options.compression;
}

// The slots of the trainable parameters in reverse registration order, which approximates the
// order backward produces gradients in, so the first bucket completes first; and which slots
// share a bucket.
std::vector<std::vector<int>> plan_buckets(const torch::nn::Module& module,
                                           const DataParallelOptions& options,
                                           std::vector<ParamSlot>& params) {
  const double capacity = options.bucket_mb * 1024.0 * 1024.0;
  const auto named = module.named_parameters(/*recurse=*/true);
  std::vector<std::vector<int>> members;
  double bytes = 0;
  for (auto it = named.end(); it != named.begin();) {
    --it;
    const auto& param = it->value();
    if (!param.requires_grad() || options.exclude.count(it->key())) continue;
    const int index = static_cast<int>(params.size());
    ParamSlot slot;
    slot.name = it->key();
    slot.param = param;
    params.push_back(std::move(slot));
    const double b = static_cast<double>(param.numel()) * param.element_size();
    bool open_new = members.empty() || bytes + b > capacity;
    if (!open_new) {
      const auto& first = params[members.back().front()].param;
      open_new = first.scalar_type() != param.scalar_type() || first.device() != param.device();
    }
    if (open_new) {
      members.emplace_back();
      bytes = 0;
    }
    members.back().push_back(index);
    bytes += b;
  }
  return members;
}

// Allocates bucket `b`'s buffers and re-points its parameters' gradients into them.
Bucket allocate_bucket(BucketLayout& layout, const std::vector<int>& members, bool last,
                       const DataParallelOptions& options, std::int64_t carry_slots) {
  const auto wire = plain_wire(options);
  Bucket bucket;
  std::int64_t numel = 0;
  for (int i : members) numel += layout.params[i].param.numel();
  const auto& first = layout.params[members.front()].param;
  // The last bucket to launch has room for the carried values behind its gradients.
  const bool carries =
      last && options.compression == GradCompression::None && first.scalar_type() == torch::kFloat;
  bucket.buffer = torch::zeros({numel + (carries ? carry_slots : 0)}, first.options().requires_grad(false));
  bucket.grads = bucket.buffer.narrow(0, 0, numel);
  if (carries) {
    layout.carry_slots = bucket.buffer.narrow(0, numel, carry_slots);
    layout.carry_inline = true;
  }
  if (wire != GradCompression::None) {
    bucket.wire = torch::zeros({numel}, bucket.buffer.options().dtype(wire_dtype(wire)));
  }
  std::int64_t offset = 0;
  for (int i : members) {
    auto& slot = layout.params[i];
    slot.bucket = static_cast<int>(layout.buckets.size());
    slot.offset = offset;
    // In the parameter's own memory order where it is dense (a channels-last weight's gradient is
    // channels-last), as DDP's gradient_as_bucket_view lays its views out: autograd then writes each
    // gradient into the bucket without a strided copy. PowerSGD reads each slot as a matrix view,
    // which needs the default order.
    const bool own_order =
        options.compression != GradCompression::PowerSgd && slot.param.is_non_overlapping_and_dense();
    const auto strides = own_order ? slot.param.strides().vec() : std::vector<std::int64_t>{};
    slot.view = storage_alias(bucket.buffer, offset, slot.param.sizes(), strides);
    // A gradient already present (a step before wrapping) is kept, now inside the bucket.
    if (slot.param.grad().defined()) slot.view.copy_(slot.param.grad());
    slot.param.mutable_grad() = slot.view;
    offset += slot.param.numel();
  }
  bucket.params = members;
  bucket.pending = static_cast<int>(bucket.params.size());
  return bucket;
}

}  // namespace

torch::ScalarType wire_dtype(GradCompression wire) {
  switch (wire) {
    case GradCompression::Fp16:
      return torch::kHalf;
    case GradCompression::Bf16:
      return torch::kBFloat16;
    case GradCompression::None:
    case GradCompression::PowerSgd:
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "a 16-bit wire is fp16 or bf16");
}

BucketLayout build_buckets(const torch::nn::Module& module, const DataParallelOptions& options,
                           std::int64_t carry_slots) {
  BucketLayout layout;
  const auto members = plan_buckets(module, options, layout.params);
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < members.size(); ++b) {
    layout.buckets.push_back(
        allocate_bucket(layout, members[b], b + 1 == members.size(), options, carry_slots));
  }
  // No float32 bucket to ride in: the values get an all-reduce of their own in finish().
  if (!layout.carry_slots.defined()) {
    auto options = torch::TensorOptions().dtype(torch::kFloat);
    for (const auto& p : module.parameters()) {
      options = options.device(p.device());  // where the model lives, so the all-reduce carries it alike
      break;
    }
    layout.carry_slots = torch::zeros({carry_slots}, options);
  }
  return layout;
}

torch::Tensor storage_alias(const torch::Tensor& buffer, std::int64_t offset, torch::IntArrayRef sizes,
                            torch::IntArrayRef strides) {
  auto alias = torch::empty({0}, buffer.options());
  if (strides.empty()) {
    alias.set_(buffer.storage(), buffer.storage_offset() + offset, sizes, c10::contiguous_strides(sizes));
  } else {
    alias.set_(buffer.storage(), buffer.storage_offset() + offset, sizes, strides);
  }
  return alias;
}

bool is_view_of(const torch::Tensor& grad, const torch::Tensor& view) {
  return grad.defined() && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes() &&
         grad.strides() == view.strides();
}

}  // namespace dtrain::parallel::detail
