// Tensor parallelism's differentiable collectives; see TensorOps.h.
#include "dtrain/parallel/TensorOps.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <utility>
#include <vector>

namespace dtrain::parallel::tensor {

namespace {

// The group a function's backward talks over, kept in its context.
struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(comm::CommunicatorPtr c) : comm(std::move(c)) {}
  comm::CommunicatorPtr comm;
};

void keep_group(torch::autograd::AutogradContext* ctx, const comm::CommunicatorPtr& group,
                std::int64_t dim = 0) {
  ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
  ctx->saved_data["dim"] = dim;
}

comm::Communicator& group_of(torch::autograd::AutogradContext* ctx) {
  return *c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data["group"].toCapsule())->comm;
}

std::int64_t dim_of(torch::autograd::AutogradContext* ctx) {
  return ctx->saved_data["dim"].toInt();
}

at::Tensor all_reduced(const at::Tensor& x, comm::Communicator& group) {
  auto out = x.contiguous().clone();
  group.allreduce(out);
  return out;
}

// The sum over the group of x's parts along dim, this rank's part.
at::Tensor reduce_scattered(const at::Tensor& x, std::int64_t dim, comm::Communicator& group) {
  const int parts = group.size();
  TORCH_CHECK(x.size(dim) % parts == 0, "tensor parallelism: dimension ", dim, " of size ", x.size(dim),
              " does not split into ", parts, " equal parts");
  // (parts, ...) with part r contiguous, as reduce_scatter takes its chunks.
  auto chunks = torch::stack(x.chunk(parts, dim)).contiguous();
  auto out = torch::empty_like(chunks[0]).contiguous();
  group.reduce_scatter(chunks, out);
  return out;
}

class CopyToGroup : public torch::autograd::Function<CopyToGroup> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const comm::CommunicatorPtr& group) {
    keep_group(ctx, group);
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {all_reduced(grads[0], group_of(ctx)), at::Tensor()};
  }
};

class ReduceFromGroup : public torch::autograd::Function<ReduceFromGroup> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x,
                            const comm::CommunicatorPtr& group) {
    return all_reduced(x, *group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

class GatherAlong : public torch::autograd::Function<GatherAlong> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, std::int64_t dim,
                            const comm::CommunicatorPtr& group) {
    keep_group(ctx, group, dim);
    return all_gather_concat(x, dim, *group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto& group = group_of(ctx);
    return {local_part(grads[0], dim_of(ctx), group.rank(), group.size()).contiguous(), at::Tensor(),
            at::Tensor()};
  }
};

class SplitAlong : public torch::autograd::Function<SplitAlong> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, std::int64_t dim,
                            const comm::CommunicatorPtr& group) {
    keep_group(ctx, group, dim);
    return local_part(x, dim, group->rank(), group->size()).contiguous();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {all_gather_concat(grads[0], dim_of(ctx), group_of(ctx)), at::Tensor(), at::Tensor()};
  }
};

class ReduceScatterAlong : public torch::autograd::Function<ReduceScatterAlong> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, std::int64_t dim,
                            const comm::CommunicatorPtr& group) {
    keep_group(ctx, group, dim);
    return reduce_scattered(x, dim, *group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {all_gather_concat(grads[0], dim_of(ctx), group_of(ctx)), at::Tensor(), at::Tensor()};
  }
};

class GatherReduceScatterAlong : public torch::autograd::Function<GatherReduceScatterAlong> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, std::int64_t dim,
                            const comm::CommunicatorPtr& group) {
    keep_group(ctx, group, dim);
    return all_gather_concat(x, dim, *group);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {reduce_scattered(grads[0], dim_of(ctx), group_of(ctx)), at::Tensor(), at::Tensor()};
  }
};

std::int64_t wrap(std::int64_t dim, const at::Tensor& x) {
  return dim < 0 ? dim + x.dim() : dim;
}

}  // namespace

at::Tensor all_gather_concat(const at::Tensor& x, std::int64_t dim, comm::Communicator& group) {
  dim = wrap(dim, x);
  const int parts = group.size();
  auto input = x.contiguous();
  std::vector<std::int64_t> shape{parts};
  for (const auto size : input.sizes()) shape.push_back(size);
  auto gathered = torch::empty(shape, input.options());
  group.allgather(input, gathered);
  return torch::cat(gathered.unbind(0), dim);
}

at::Tensor local_part(const at::Tensor& whole, std::int64_t dim, int rank, int parts) {
  dim = wrap(dim, whole);
  TORCH_CHECK(whole.size(dim) % parts == 0, "tensor parallelism: dimension ", dim, " of size ",
              whole.size(dim), " does not split into ", parts, " equal parts");
  const auto size = whole.size(dim) / parts;
  return whole.narrow(dim, rank * size, size);
}

at::Tensor copy_to_group(const at::Tensor& x, const comm::CommunicatorPtr& group) {
  return CopyToGroup::apply(x, group);
}
at::Tensor reduce_from_group(const at::Tensor& x, const comm::CommunicatorPtr& group) {
  return ReduceFromGroup::apply(x, group);
}
at::Tensor gather_along(const at::Tensor& x, std::int64_t dim, const comm::CommunicatorPtr& group) {
  return GatherAlong::apply(x, wrap(dim, x), group);
}
at::Tensor split_along(const at::Tensor& x, std::int64_t dim, const comm::CommunicatorPtr& group) {
  return SplitAlong::apply(x, wrap(dim, x), group);
}
at::Tensor reduce_scatter_along(const at::Tensor& x, std::int64_t dim, const comm::CommunicatorPtr& group) {
  return ReduceScatterAlong::apply(x, wrap(dim, x), group);
}
at::Tensor gather_reduce_scatter_along(const at::Tensor& x, std::int64_t dim,
                                       const comm::CommunicatorPtr& group) {
  return GatherReduceScatterAlong::apply(x, wrap(dim, x), group);
}

}  // namespace dtrain::parallel::tensor
