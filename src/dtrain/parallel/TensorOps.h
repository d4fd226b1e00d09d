// The differentiable collectives of tensor parallelism (Megatron-LM, Shoeybi et al. 2019, §3, and its
// sequence parallelism, Korthikanti et al. 2022, §4.2.2), each an autograd function over a tp group's
// communicator: what runs forward, and its adjoint in backward. See Note [Tensor parallelism] in
// TensorParallel.h for where each one sits in a layer.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "dtrain/comm/Communicator.h"

namespace dtrain::parallel::tensor {

// Megatron's f: identity forward, all-reduce of the gradient backward. Before a column-parallel
// layer (its input is replicated, each rank's gradient of it partial), and on a parameter that
// ranks use on different shards of the sequence (its gradient the sum of theirs).
at::Tensor copy_to_group(const at::Tensor& x, const comm::CommunicatorPtr& group);
// Megatron's g: all-reduce forward, identity backward. After a row-parallel layer.
at::Tensor reduce_from_group(const at::Tensor& x, const comm::CommunicatorPtr& group);
// The group's tensors concatenated along `dim` forward; this rank's slice of the gradient backward.
at::Tensor gather_along(const at::Tensor& x, std::int64_t dim, const comm::CommunicatorPtr& group);
// This rank's slice along `dim` forward (size divisible by the group); the gathered gradient backward.
at::Tensor split_along(const at::Tensor& x, std::int64_t dim, const comm::CommunicatorPtr& group);
// Sequence parallelism's g: the sum over the group, this rank keeping its slice along `dim`, forward
// (a reduce-scatter); the gradients gathered along `dim` backward.
at::Tensor reduce_scatter_along(const at::Tensor& x, std::int64_t dim, const comm::CommunicatorPtr& group);
// Sequence parallelism's f: gathered along `dim` forward, the gradient reduce-scattered backward.
at::Tensor gather_reduce_scatter_along(const at::Tensor& x, std::int64_t dim,
                                       const comm::CommunicatorPtr& group);

// Forward-only helpers, no autograd (batches, outputs for metrics, checkpoints).
// The group's tensors concatenated along `dim`; every rank's must have the same shape.
at::Tensor all_gather_concat(const at::Tensor& x, std::int64_t dim, comm::Communicator& group);
// This rank's part of `whole` split along `dim` into group.size() equal parts.
at::Tensor local_part(const at::Tensor& whole, std::int64_t dim, int rank, int parts);

}  // namespace dtrain::parallel::tensor
