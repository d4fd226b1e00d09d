// The device mesh (parallel/Mesh.h): coordinates and groups with dp_shard innermost; what each
// strategy makes of parallel.mesh, and the one-line refusals naming the key; and, ranks as threads
// over gloo, sub-communicators that reduce within their own groups only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/parallel/Mesh.h"
#include "dtrain/parallel/Registry.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

TEST(MeshShape, CoordinatesAndGroupsPutDpShardInnermost) {
  const MeshShape shape{2, 2, 2};
  ASSERT_EQ(shape.size(), 8);
  // Rank 5 = pp 1 x (2 x 2) + dp_replicate 0 x 2 + dp_shard 1.
  EXPECT_EQ(shape.coordinate(5, MeshDim::Pp), 1);
  EXPECT_EQ(shape.coordinate(5, MeshDim::DpReplicate), 0);
  EXPECT_EQ(shape.coordinate(5, MeshDim::DpShard), 1);
  EXPECT_EQ(shape.group(5, MeshDim::DpShard), (std::vector<int>{4, 5}));
  EXPECT_EQ(shape.group(5, MeshDim::DpReplicate), (std::vector<int>{5, 7}));
  EXPECT_EQ(shape.group(5, MeshDim::Pp), (std::vector<int>{1, 5}));
  EXPECT_EQ(shape.groups(MeshDim::DpReplicate),
            (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(shape.describe(), "pp 2 x dp_replicate 2 x dp_shard 2");

  // HSDP on 4 ranks: shard groups {0,1} and {2,3}; ranks 0 and 2 hold the same shard.
  const MeshShape hsdp{1, 2, 2};
  EXPECT_EQ(hsdp.groups(MeshDim::DpShard), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(hsdp.groups(MeshDim::DpReplicate), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(hsdp.groups(MeshDim::Pp), (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}}));

  // Every shape: along each dimension the groups hold every rank once, with coordinates 0..d-1, and
  // a rank is fixed by its coordinates.
  for (const MeshShape s : {MeshShape{1, 1, 6}, MeshShape{3, 2, 1}, MeshShape{2, 3, 2}, MeshShape{1, 4, 3}}) {
    for (const auto dim : kMeshDims) {
      std::multiset<int> seen;
      for (const auto& group : s.groups(dim)) {
        ASSERT_EQ(static_cast<int>(group.size()), s.degree(dim));
        for (int i = 0; i < s.degree(dim); ++i) {
          EXPECT_EQ(s.coordinate(group[i], dim), i) << s.describe();
          EXPECT_EQ(s.group(group[i], dim), group) << s.describe();
          seen.insert(group[i]);
        }
      }
      for (int r = 0; r < s.size(); ++r) EXPECT_EQ(seen.count(r), 1u) << s.describe() << " rank " << r;
    }
    std::set<std::vector<int>> coordinates;
    for (int r = 0; r < s.size(); ++r) {
      coordinates.insert({s.coordinate(r, MeshDim::Pp), s.coordinate(r, MeshDim::DpReplicate),
                          s.coordinate(r, MeshDim::DpShard)});
    }
    EXPECT_EQ(static_cast<int>(coordinates.size()), s.size()) << s.describe();
  }
}

config::ParallelConfig parallel_of(std::vector<std::string> overrides) {
  return config::parse_run_config("", "<mesh test>", overrides).parallel;
}

// The message resolve_mesh throws, or "" when it accepts.
std::string refusal(const std::vector<std::string>& overrides, int world) {
  try {
    resolve_mesh(parallel_of(overrides), world);
    return "";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST(MeshConfig, EachStrategyTakesItsDimensionsAndAnUnsetMeshIsTodays) {
  // Unset: what each strategy does on its own.
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=zero"}), 4), (MeshShape{1, 1, 4}));
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=data_parallel"}), 4), (MeshShape{1, 4, 1}));
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=dad"}), 3), (MeshShape{1, 3, 1}));
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=pipeline", "parallel.pipeline.stages=2"}), 6),
            (MeshShape{2, 3, 1}));
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=pipeline"}), 3), (MeshShape{3, 1, 1}));
  EXPECT_FALSE(resolve_mesh(parallel_of({"parallel.strategy=local"}), 2).has_value());

  // zero: dp_replicate x dp_shard (HSDP); an unset degree in a set mesh is 1.
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=zero", "parallel.mesh.dp_replicate=2",
                                       "parallel.mesh.dp_shard=2"}),
                          4),
            (MeshShape{1, 2, 2}));
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=zero", "parallel.mesh.dp_replicate=4"}), 4),
            (MeshShape{1, 4, 1}));
  EXPECT_EQ(
      refusal({"parallel.strategy=zero", "parallel.mesh.dp_replicate=2", "parallel.mesh.dp_shard=2"}, 8),
      "parallel.mesh: pp 1 x dp_replicate 2 x dp_shard 2 = 4 ranks, but the job has 8; make the degrees' "
      "product 8, or leave the mesh out (on the command line: parallel.mesh=null)");
  EXPECT_TRUE(starts_with(refusal({"parallel.strategy=zero", "parallel.mesh.dp_shard=2"}, 4),
                          "parallel.mesh: pp 1 x dp_replicate 1 x dp_shard 2 = 2 ranks, but the job has 4"));
  EXPECT_TRUE(
      starts_with(refusal({"parallel.strategy=zero", "parallel.mesh.pp=2", "parallel.mesh.dp_shard=2"}, 4),
                  "parallel.mesh.pp: 2, but parallel.strategy zero takes dp_replicate, dp_shard and tp"));

  // data_parallel: dp_replicate only, which is then the world.
  EXPECT_EQ(
      *resolve_mesh(parallel_of({"parallel.strategy=data_parallel", "parallel.mesh.dp_replicate=4"}), 4),
      (MeshShape{1, 4, 1}));
  EXPECT_TRUE(
      starts_with(refusal({"parallel.strategy=data_parallel", "parallel.mesh.dp_shard=4"}, 4),
                  "parallel.mesh.dp_shard: 4, but parallel.strategy data_parallel takes dp_replicate"));

  // pipeline: pp x dp_replicate x dp_shard, pp agreeing with parallel.pipeline.stages.
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=pipeline", "parallel.mesh.pp=2",
                                       "parallel.mesh.dp_replicate=2"}),
                          4),
            (MeshShape{2, 2, 1}));
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=pipeline", "parallel.pipeline.stages=2",
                                       "parallel.mesh.dp_replicate=2"}),
                          4),
            (MeshShape{2, 2, 1}));
  EXPECT_TRUE(starts_with(
      refusal({"parallel.strategy=pipeline", "parallel.pipeline.stages=4", "parallel.mesh.pp=2",
               "parallel.mesh.dp_replicate=2"},
              4),
      "parallel.mesh.pp: 2, but parallel.strategy pipeline's own setting of it is 4; they must agree"));
  // pp x dp_shard: the stages shard their optimizer state (Note [A stage sharded over dp_shard]).
  EXPECT_EQ(
      *resolve_mesh(
          parallel_of({"parallel.strategy=pipeline", "parallel.mesh.pp=2", "parallel.mesh.dp_shard=2"}), 4),
      (MeshShape{2, 1, 2}));

  // The others: only the mesh they form on their own.
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=dad", "parallel.mesh.dp_replicate=2"}), 2),
            (MeshShape{1, 2, 1}));
  EXPECT_TRUE(starts_with(refusal({"parallel.strategy=dad", "parallel.mesh.dp_shard=2"}, 2),
                          "parallel.mesh.dp_shard: 2, but parallel.strategy dad takes no mesh dimension"));
  EXPECT_NE(refusal({"parallel.strategy=dad", "parallel.mesh.dp_shard=2"}, 2)
                .find("set it to what the strategy does: pp 1 x dp_replicate 2 x dp_shard 1"),
            std::string::npos);
  EXPECT_TRUE(
      starts_with(refusal({"parallel.strategy=local", "parallel.mesh.dp_replicate=2"}, 2),
                  "parallel.mesh.dp_replicate: 2, but parallel.strategy local takes no mesh dimension "
                  "(every rank trains a model of its own without communicating); leave parallel.mesh out"));
  EXPECT_TRUE(
      starts_with(refusal({"parallel.strategy=decentralized", "parallel.mesh.dp_replicate=2"}, 2),
                  "parallel.mesh.dp_replicate: 2, but parallel.strategy decentralized takes no mesh"));
  // One rank is the trivial mesh for every strategy.
  EXPECT_EQ(*resolve_mesh(parallel_of({"parallel.strategy=local", "parallel.mesh.dp_shard=1"}), 1),
            (MeshShape{}));

  // What `dtrain train --nproc` checks before it starts workers.
  const auto hsdp =
      parallel_of({"parallel.strategy=zero", "parallel.mesh.dp_replicate=2", "parallel.mesh.dp_shard=2"});
  EXPECT_EQ(data_holders(hsdp, 4), 4);
  EXPECT_THROW(data_holders(hsdp, 8), std::invalid_argument);
}

TEST(MeshConfig, TheReaderRefusesUnknownKeysAndNegativeDegrees) {
  const auto error_of = [](const std::string& override_text) -> std::string {
    try {
      parallel_of({"parallel.strategy=zero", override_text});
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  };
  EXPECT_NE(error_of("parallel.mesh.cp=2").find("parallel.mesh.cp"), std::string::npos)
      << error_of("parallel.mesh.cp=2");
  EXPECT_NE(error_of("parallel.mesh.tp=-2").find("parallel.mesh.tp"), std::string::npos);
  EXPECT_EQ(parallel_of({"parallel.mesh.tp=2"}).mesh.tp, 2);
  EXPECT_NE(error_of("parallel.mesh.dp_shard=-1").find("parallel.mesh.dp_shard"), std::string::npos);
  EXPECT_EQ(parallel_of({"parallel.mesh.dp_shard=2"}).mesh.dp_shard, 2);
  EXPECT_FALSE(mesh_set(parallel_of({}).mesh));
}

// Every rank adds rank + 1 over each of its sub-communicators: the sum is its group's, so a group
// that held another rank, or missed one, shows.
TEST(DeviceMesh, SubCommunicatorsReduceWithinTheirGroups) {
  for (const MeshShape shape : {MeshShape{2, 2, 2}, MeshShape{1, 2, 2}, MeshShape{1, 1, 3}}) {
    dtrain::testing::run_world(shape.size(), [&](comm::CommunicatorPtr world) {
      const int rank = world->rank();
      DeviceMesh mesh(shape, world);
      for (const auto dim : kMeshDims) {
        const auto& sub = mesh.comm(dim);
        ASSERT_TRUE(sub);
        EXPECT_EQ(sub->size(), shape.degree(dim)) << mesh_dim_name(dim);
        EXPECT_EQ(sub->rank(), shape.coordinate(rank, dim)) << mesh_dim_name(dim);
        auto value = torch::tensor({static_cast<double>(rank + 1)}, torch::kDouble);
        sub->allreduce(value);
        double expected = 0;
        for (const int r : shape.group(rank, dim)) expected += r + 1;
        EXPECT_EQ(value.item<double>(), expected)
            << shape.describe() << " " << mesh_dim_name(dim) << " rank " << rank;
      }
      // A dimension over the whole world is the world itself, not a second group of the same ranks.
      std::size_t distinct = 1;
      for (const auto dim : kMeshDims) distinct += shape.degree(dim) == shape.size() ? 0 : 1;
      EXPECT_EQ(mesh.communicators().size(), distinct) << shape.describe();
    });
  }
  // Only the dimensions asked for: one over the whole world is the world, unsplit (the in-process
  // double refuses any split), and the others stay null.
  dtrain::testing::run_world(
      2,
      [&](comm::CommunicatorPtr world) {
        EXPECT_THROW(DeviceMesh(MeshShape{1, 1, 4}, world), std::invalid_argument);
        DeviceMesh shard_only(MeshShape{1, 1, 2}, world, {MeshDim::DpShard});
        EXPECT_EQ(shard_only.comm(MeshDim::DpShard), world);
        EXPECT_FALSE(shard_only.comm(MeshDim::DpReplicate));
        EXPECT_FALSE(shard_only.comm(MeshDim::Pp));
        EXPECT_EQ(shard_only.communicators().size(), 1u);
      },
      dtrain::testing::WorldOptions::on("in-process"));
}

}  // namespace
}  // namespace dtrain::parallel
