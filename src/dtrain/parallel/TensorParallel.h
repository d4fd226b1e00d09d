// Tensor parallelism (parallel.mesh.tp, parallel.tensor): a model's layers split over the ranks of a
// tp group as Megatron-LM splits them, applied to the model by a plan of module names to styles,
// before the strategy (data_parallel, zero, pipeline) takes the model and the mesh's other
// dimensions. See Note [Tensor parallelism].
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/models/Network.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/parallel/Mesh.h"
#include "dtrain/parallel/Strategy.h"

namespace dtrain::parallel::tensor {

// Note [Tensor parallelism]
// Megatron-LM (Shoeybi et al. 2019) splits a transformer's layers so that a block costs two
// all-reduces of its activations forward and two backward:
//   colwise   a Linear's output features split (weight rows, bias): its input is replicated, so
//             it is passed through f (identity forward, all-reduce of its gradient backward) and
//             its output is this rank's slice of the features. colwise:K for K projections fused
//             in one Linear (attention's qkv: K = 3), each split alike, so a rank holds the q, k
//             and v of its heads: attention then runs on that share of the heads.
//   rowwise   a Linear's input features split (weight columns): it takes a colwise output slice,
//             and its output is summed over the group by g (all-reduce forward, identity
//             backward); the bias, whole on every rank, is added once after the sum.
//   embedding an Embedding's vocabulary split (weight rows): each rank looks up the ids in its
//             range, zeros the rest, and g sums them.
//   output    the model's last Linear as colwise, its outputs kept as vocabulary shards, and the
//             loss the vocabulary-parallel cross-entropy (max, sum of exponentials and the target's
//             logit each reduced over the group; optim.loss cross_entropy or nll only). The
//             outputs are gathered only for metrics and evaluation.
//   sequence  a LayerNorm run on this rank's slice of the sequence (sequence parallelism,
//             Korthikanti et al. 2022): its weight and bias pass through f, as each rank's gradient
//             of them covers its tokens only.
// With parallel.tensor.sequence_parallel the network's blocks run on sequence slices: the first
// block's input is split along the sequence, the last block's output gathered; colwise layers
// gather their input along the sequence (reduce-scattering its gradient) and rowwise layers
// reduce-scatter their output (gathering its gradient): the same bytes as the all-reduces, and the
// LayerNorms, dropouts and residuals in between hold 1/T of the activations.
// A plan is a list of "<pattern>=<style>"; a pattern is a module's name in the network
// ("layers.1.fc1") where "*" stands for any one name component. Every pattern must name at least
// one module, of the kind its style takes (dtrain's models::Linear, models::Embedding and
// models::LayerNorm: LibTorch's modules have no forward hooks to run a shard with), and every split
// size must divide by tp; otherwise the plan is refused naming the entry. dtrain's transformer and
// vit have their own plan (model_plan).
// The strategy then runs on the ranks that share this rank's tp coordinate, over the mesh without
// tp, with the sharded model: its replicas and shard groups hold the same shard. Ranks of a tp
// group take each step on the union of their batches (so the global batch is every rank's batch,
// as under data_parallel on the same ranks), each reporting its own rows; the model state,
// checkpoints and model.pt hold whole tensors, gathered from the shards and cut back on load, so a
// checkpoint moves between meshes and into one process.
enum class Style { Colwise, Rowwise, Embedding, Output, Sequence };

struct PlanEntry {
  std::string pattern;
  Style style = Style::Colwise;
  int fused = 1;     // colwise:K
  std::string text;  // as written, for messages
};

// Parses "<pattern>=<style>" lines; throws std::invalid_argument naming parallel.tensor.plan and the
// entry for one it cannot read.
std::vector<PlanEntry> parse_plan(const std::vector<std::string>& lines);

// The plan dtrain's own models come with (transformer, transformer-lm, vit), for tp ranks:
// attention's qkv colwise:3 and projection rowwise, the MLP's fc1 colwise and fc2 rowwise, a token
// embedding's vocabulary and a language model's output layer split where tp divides the vocabulary
// (whole on every rank otherwise), and with sequence parallelism the blocks' LayerNorms. Throws
// std::invalid_argument naming parallel.tensor.plan for a model that has none (a model of one's own) and
// naming model.heads where tp does not divide the heads.
std::vector<std::string> model_plan(const models::Network& model, int tp, bool sequence_parallel);

// How a parameter is split over the group: along `dim`, in `fused` parts each split alike.
struct ShardSpec {
  std::int64_t dim = 0;
  int fused = 1;
};

// This rank's shard of a whole tensor, and the whole tensor from every rank's shard in rank order.
at::Tensor shard_of(const at::Tensor& whole, const ShardSpec& spec, int rank, int parts);
at::Tensor whole_of(const std::vector<at::Tensor>& shards, const ShardSpec& spec);

// What applying a plan made of a model.
struct AppliedPlan {
  std::map<std::string, ShardSpec> sharded;  // parameter name -> its split
  bool output_sharded = false;               // the model's outputs are vocabulary shards
  std::vector<std::string> modules;          // "layers.1.fc1 colwise", in the model's order
};

// Splits `model`'s layers in place as `plan` says, over `group` (this rank's tp group): every
// parameter a style splits keeps this rank's shard (set_data; names unchanged), and the modules
// run their shards' forward. The model's values must be the same on every rank of the group
// (broadcast first). Throws std::invalid_argument naming parallel.tensor.plan and the entry for a
// pattern that names no module, a module of the wrong kind, or a size tp does not divide.
AppliedPlan apply_plan(models::Network& model, const std::vector<PlanEntry>& plan, bool sequence_parallel,
                       const comm::CommunicatorPtr& group);

// The softmax cross-entropy of vocabulary-sharded logits (N, V/T) or (N, T, V/T) and whole targets,
// the mean over positions as optim.loss cross_entropy gives, over `group`.
optim::LossFn vocab_parallel_cross_entropy(comm::CommunicatorPtr group);

// Builds the strategy `create` makes over the mesh's ranks of this rank's tp coordinate, with the
// model split over its tp group; the strategy returned is the one the trainer sees (see the Note).
// Collective over context.comm.
std::unique_ptr<Strategy> create_tensor_parallel(
    StrategyContext context, const MeshShape& shape,
    const std::function<std::unique_ptr<Strategy>(StrategyContext)>& create);

}  // namespace dtrain::parallel::tensor
