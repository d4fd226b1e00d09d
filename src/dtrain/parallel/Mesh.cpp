// The device mesh's arithmetic, what a strategy makes of parallel.mesh, and the sub-communicators;
// see Mesh.h, Note [The device mesh].
#include "dtrain/parallel/Mesh.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "dtrain/parallel/Registry.h"

namespace dtrain::parallel {

const char* mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::Pp:
      return "pp";
    case MeshDim::DpReplicate:
      return "dp_replicate";
    case MeshDim::DpShard:
      return "dp_shard";
    case MeshDim::Tp:
      return "tp";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown mesh dimension");
}

int MeshShape::degree(MeshDim dim) const {
  switch (dim) {
    case MeshDim::Pp:
      return pp;
    case MeshDim::DpReplicate:
      return dp_replicate;
    case MeshDim::DpShard:
      return dp_shard;
    case MeshDim::Tp:
      return tp;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown mesh dimension");
}

namespace {

// Ranks between neighbours along `dim`: the product of the degrees inside it.
int stride(const MeshShape& shape, MeshDim dim) {
  switch (dim) {
    case MeshDim::Pp:
      return shape.dp_replicate * shape.dp_shard * shape.tp;
    case MeshDim::DpReplicate:
      return shape.dp_shard * shape.tp;
    case MeshDim::DpShard:
      return shape.tp;
    case MeshDim::Tp:
      return 1;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown mesh dimension");
}

}  // namespace

int MeshShape::coordinate(int rank, MeshDim dim) const {
  TORCH_INTERNAL_ASSERT(rank >= 0 && rank < size(), "rank ", rank, " outside a mesh of ", size());
  return (rank / stride(*this, dim)) % degree(dim);
}

std::vector<int> MeshShape::group(int rank, MeshDim dim) const {
  const int step = stride(*this, dim);
  const int first = rank - coordinate(rank, dim) * step;
  std::vector<int> ranks;
  for (int i = 0; i < degree(dim); ++i) ranks.push_back(first + i * step);
  return ranks;
}

std::vector<std::vector<int>> MeshShape::groups(MeshDim dim) const {
  std::vector<std::vector<int>> out;
  for (int rank = 0; rank < size(); ++rank) {
    if (coordinate(rank, dim) == 0) out.push_back(group(rank, dim));
  }
  return out;
}

std::string MeshShape::describe() const {
  auto text = fmt::format("pp {} x dp_replicate {} x dp_shard {}", pp, dp_replicate, dp_shard);
  if (tp > 1) text += fmt::format(" x tp {}", tp);
  return text;
}

bool mesh_set(const config::MeshConfig& mesh) {
  return mesh.pp != 0 || mesh.dp_replicate != 0 || mesh.dp_shard != 0 || mesh.tp > 1;
}

namespace {

int configured(const config::MeshConfig& mesh, MeshDim dim) {
  switch (dim) {
    case MeshDim::Pp:
      return mesh.pp;
    case MeshDim::DpReplicate:
      return mesh.dp_replicate;
    case MeshDim::DpShard:
      return mesh.dp_shard;
    case MeshDim::Tp:
      return mesh.tp;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown mesh dimension");
}

int& degree_of(MeshShape& shape, MeshDim dim) {
  switch (dim) {
    case MeshDim::Pp:
      return shape.pp;
    case MeshDim::DpReplicate:
      return shape.dp_replicate;
    case MeshDim::DpShard:
      return shape.dp_shard;
    case MeshDim::Tp:
      return shape.tp;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown mesh dimension");
}

std::string taken_dims(const MeshUse& use) {
  if (use.dims.empty()) return "no mesh dimension";
  std::string text;
  for (std::size_t i = 0; i < use.dims.size(); ++i) {
    if (i > 0) text += i + 1 == use.dims.size() ? " and " : ", ";
    text += mesh_dim_name(use.dims[i]);
  }
  return text;
}

}  // namespace

std::optional<MeshShape> resolve_mesh(const config::ParallelConfig& parallel, int world) {
  const auto& info = find_strategy(parallel.strategy);
  const auto& use = info.mesh;
  if (parallel.mesh.tp <= 1 && (!parallel.tensor.plan.empty() || parallel.tensor.sequence_parallel)) {
    throw std::invalid_argument(fmt::format(
        "parallel.tensor.{}: set, but parallel.mesh.tp is {}; tensor parallelism needs tp > 1, so "
        "set parallel.mesh.tp or remove parallel.tensor (on the command line: parallel.tensor=null)",
        parallel.tensor.plan.empty() ? "sequence_parallel" : "plan", std::max(1, parallel.mesh.tp)));
  }
  if (parallel.mesh.tp > 1) {
    const int tp = parallel.mesh.tp;
    if (std::find(use.dims.begin(), use.dims.end(), MeshDim::Tp) == use.dims.end()) {
      throw std::invalid_argument(fmt::format(
          "parallel.mesh.tp: {}, but parallel.strategy {} takes {} ({}); use data_parallel, zero or pipeline "
          "with tp, or set parallel.mesh.tp to 1",
          tp, info.name, taken_dims(use), use.because));
    }
    if (world % tp != 0) {
      throw std::invalid_argument(fmt::format(
          "parallel.mesh.tp: {} does not divide the job's {} ranks; choose tp among the divisors of {}", tp,
          world, world));
    }
    auto rest = parallel;
    rest.mesh.tp = 0;
    rest.tensor = {};
    auto shape = resolve_mesh(rest, world / tp);
    if (!shape) shape = MeshShape{};
    if (shape->size() != world / tp) {
      throw std::invalid_argument(fmt::format(
          "parallel.mesh: tp {} leaves {} ranks, which parallel.strategy {} does not arrange in a mesh; set "
          "the other degrees so that their product is {}",
          tp, world / tp, info.name, world / tp));
    }
    shape->tp = tp;
    return shape;
  }
  const auto implied = use.implied ? use.implied(parallel, world) : std::nullopt;
  if (!mesh_set(parallel.mesh)) return implied;

  MeshShape shape;
  for (const auto dim : kMeshDims) {
    const int set = configured(parallel.mesh, dim);
    const int own = use.own_degree ? use.own_degree(parallel, dim) : 0;
    if (set != 0 && own != 0 && set != own) {
      throw std::invalid_argument(fmt::format(
          "parallel.mesh.{}: {}, but parallel.strategy {}'s own setting of it is {}; they must agree, so set "
          "one of them or both alike",
          mesh_dim_name(dim), set, info.name, own));
    }
    degree_of(shape, dim) = set != 0 ? set : (own != 0 ? own : 1);
  }
  if (shape.size() != world) {
    throw std::invalid_argument(fmt::format(
        "parallel.mesh: {} = {} ranks, but the job has {}; make the degrees' product {}, or leave "
        "the mesh out (on the command line: parallel.mesh=null)",
        shape.describe(), shape.size(), world, world));
  }
  if (world == 1) return shape;  // one rank: the trivial mesh, whatever the strategy
  for (const auto dim : kMeshDims) {
    const bool taken = std::find(use.dims.begin(), use.dims.end(), dim) != use.dims.end();
    if (taken || shape.degree(dim) == 1) continue;
    if (use.dims.empty() && implied && *implied == shape) continue;
    throw std::invalid_argument(fmt::format(
        "parallel.mesh.{}: {}, but parallel.strategy {} takes {} ({}); {}", mesh_dim_name(dim),
        shape.degree(dim), info.name, taken_dims(use), use.because,
        use.dims.empty() && implied
            ? fmt::format("leave parallel.mesh out or set it to what the strategy does: {}",
                          implied->describe())
        : use.dims.empty() ? std::string("leave parallel.mesh out")
                           : fmt::format("set parallel.mesh.{} to 1 or leave it out", mesh_dim_name(dim))));
  }
  return shape;
}

DeviceMesh::DeviceMesh(const MeshShape& shape, comm::CommunicatorPtr world, const std::vector<MeshDim>& dims)
    : shape_(shape), world_(std::move(world)) {
  TORCH_INTERNAL_ASSERT(world_, "a device mesh needs a communicator");
  if (shape_.size() != world_->size()) {
    throw std::invalid_argument(fmt::format("parallel.mesh: {} = {} ranks, but the job has {}",
                                            shape_.describe(), shape_.size(), world_->size()));
  }
  for (const auto dim : kMeshDims) {
    if (std::find(dims.begin(), dims.end(), dim) == dims.end()) continue;
    if (shape_.degree(dim) == world_->size()) {
      comms_[index(dim)] = world_;
      continue;
    }
    // Every rank takes part in every group's split, in the same order (Communicator::split).
    for (const auto& ranks : shape_.groups(dim)) {
      auto sub = world_->split(ranks);
      if (sub) comms_[index(dim)] = std::move(sub);
    }
    TORCH_INTERNAL_ASSERT(comms_[index(dim)], "rank ", rank(), " is in no group along ", mesh_dim_name(dim));
  }
}

std::vector<comm::CommunicatorPtr> DeviceMesh::communicators() const {
  std::vector<comm::CommunicatorPtr> out{world_};
  for (const auto& c : comms_) {
    if (c && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

}  // namespace dtrain::parallel
