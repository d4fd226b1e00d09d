// The device mesh (parallel.mesh): the world's ranks arranged in named dimensions, pp, dp_replicate,
// dp_shard and tp from outermost to innermost, as torchtitan's ParallelDims, with a sub-communicator per
// dimension. MeshShape is the arithmetic of coordinates and groups, DeviceMesh the communicators,
// resolve_mesh what a strategy makes of the configured degrees. See Note [The device mesh].
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfig.h"

namespace dtrain::parallel {

// Note [The device mesh]
// A mesh gives every rank one coordinate per dimension; the ranks that differ in one dimension's
// coordinate only form that dimension's group, and each group is a sub-communicator. The order,
// outermost first, is torchtitan's: pp, dp_replicate, dp_shard, tp. The innermost dimensions hold
// consecutive ranks, and a launcher numbers a host's ranks consecutively, so a tensor-parallel group
// (activations all-reduced twice per layer, forward and backward) and then a shard group (whose
// all-gathers and reduce-scatters carry the whole model every step) stay inside a host where they
// can, while replicas (one all-reduce of a shard per step) and pipeline stages (activations only)
// cross hosts. Rank r's coordinates: tp = r mod T, dp_shard = (r / T) mod S,
// dp_replicate = (r / (T S)) mod R, pp = r / (R S T).
// tp is applied to the model before the strategy sees it (TensorParallel.h, Note [Tensor
// parallelism]): the strategy then runs on the ranks of one tp coordinate, over a mesh without tp. A strategy
// declares the dimensions it takes where it registers (StrategyInfo::mesh, MeshUse below); resolve_mesh()
// refuses a degree it cannot honour, naming the key, rather than running something else. A mesh left unset is
// what the strategy does on its own (MeshUse::implied): zero on N ranks is {dp_shard: N}, data_parallel
// {dp_replicate: N}.
enum class MeshDim { Pp, DpReplicate, DpShard, Tp };
inline constexpr std::array<MeshDim, 4> kMeshDims{MeshDim::Pp, MeshDim::DpReplicate, MeshDim::DpShard,
                                                  MeshDim::Tp};

// The dimension's key under parallel.mesh: "pp", "dp_replicate", "dp_shard", "tp".
const char* mesh_dim_name(MeshDim dim);

// The degrees of a mesh and the arithmetic of its ranks; no communication.
struct MeshShape {
  int pp = 1;
  int dp_replicate = 1;
  int dp_shard = 1;
  int tp = 1;

  int degree(MeshDim dim) const;
  // The number of ranks: the product of the degrees.
  int size() const { return pp * dp_replicate * dp_shard * tp; }
  // `rank`'s coordinate along `dim`, in [0, degree(dim)).
  int coordinate(int rank, MeshDim dim) const;
  // The ranks whose coordinates equal `rank`'s in every dimension but `dim`, in order of their
  // coordinate along `dim` (which is rank order): `rank`'s group along `dim`.
  std::vector<int> group(int rank, MeshDim dim) const;
  // Every group along `dim`, ordered by their first rank; together they hold each rank once.
  std::vector<std::vector<int>> groups(MeshDim dim) const;
  // "pp 1 x dp_replicate 2 x dp_shard 2", with " x tp T" where T > 1
  std::string describe() const;
  bool operator==(const MeshShape& other) const {
    return pp == other.pp && dp_replicate == other.dp_replicate && dp_shard == other.dp_shard &&
           tp == other.tp;
  }
  bool operator!=(const MeshShape& other) const { return !(*this == other); }
};

// What a strategy takes from parallel.mesh, declared where it registers (StrategyInfo::mesh).
struct MeshUse {
  // The dimensions whose degrees it honours. A degree other than 1 in any other dimension is refused
  // with `because`; a strategy that takes none accepts only the mesh it implies.
  std::vector<MeshDim> dims{};
  // One line on how its ranks share the work, for the refusal: "keeps the whole model on every rank".
  std::string because = "its registration declares no mesh dimension";
  // Its own setting of a dimension's degree, 0 where it has none (pipeline: parallel.pipeline.stages
  // for pp). A mesh's unset degree takes it; a set one must agree with it.
  std::function<int(const config::ParallelConfig&, MeshDim)> own_degree{};
  // The mesh its ranks form without parallel.mesh on `world` ranks; nullopt where they form none
  // (local, decentralized: every rank trains models of its own). Null: nullopt.
  std::function<std::optional<MeshShape>(const config::ParallelConfig&, int world)> implied{};
};

// Whether parallel.mesh sets any degree, tp included.
bool mesh_set(const config::MeshConfig& mesh);

// The mesh parallel.strategy runs on `world` ranks: parallel.mesh's degrees (an unset one is the
// strategy's own setting, else 1) checked against the world size and what the strategy takes, or,
// with parallel.mesh unset, the mesh it implies. With tp > 1 the other degrees are resolved on
// world / tp ranks (a mesh that sets only tp: the strategy's own mesh there), and the strategy must
// take tp. nullopt: the strategy's ranks form no mesh.
// Throws std::invalid_argument naming parallel.mesh or the key of the degree it refuses.
std::optional<MeshShape> resolve_mesh(const config::ParallelConfig& parallel, int world);

// A mesh's sub-communicators on one rank. Built collectively: every rank of `world` constructs it
// with the same shape and dimensions, taking part in every split, so no rank waits on a group it is
// not in.
class DeviceMesh {
 public:
  // Builds the sub-communicators of `dims` only (a strategy asks for those it talks over, so a
  // dimension it does not use costs no split). Throws std::invalid_argument when shape.size() is not
  // the world's size.
  DeviceMesh(const MeshShape& shape, comm::CommunicatorPtr world,
             const std::vector<MeshDim>& dims = {kMeshDims.begin(), kMeshDims.end()});

  const MeshShape& shape() const { return shape_; }
  int rank() const { return world_->rank(); }
  int coordinate(MeshDim dim) const { return shape_.coordinate(rank(), dim); }
  std::vector<int> group(MeshDim dim) const { return shape_.group(rank(), dim); }
  // This rank's group along `dim`, numbered by the coordinate along it: the world itself where the
  // dimension spans every rank, a communicator of one rank where its degree is 1; null for a
  // dimension the constructor was not asked to build.
  const comm::CommunicatorPtr& comm(MeshDim dim) const { return comms_[index(dim)]; }
  const comm::CommunicatorPtr& world() const { return world_; }
  // The world and every sub-communicator built that is not the world, each once: the communicators
  // whose traffic a strategy on the mesh counts as its own.
  std::vector<comm::CommunicatorPtr> communicators() const;

 private:
  static std::size_t index(MeshDim dim) { return static_cast<std::size_t>(dim); }
  MeshShape shape_;
  comm::CommunicatorPtr world_;
  std::array<comm::CommunicatorPtr, 4> comms_;
};

}  // namespace dtrain::parallel
