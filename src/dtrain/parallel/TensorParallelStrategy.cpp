// The strategy tensor parallelism hands the trainer: another strategy over the ranks of one tp
// coordinate, with the model split over the tp group; see Note [Tensor parallelism] in
// TensorParallel.h.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/lbfgs.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "dtrain/models/TiedParameters.h"
#include "dtrain/parallel/TensorOps.h"
#include "dtrain/parallel/TensorParallel.h"

namespace dtrain::parallel::tensor {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Note [A tp group's batch]
// Ranks of a tp group compute one forward together, so each step (and
// each evaluation batch) runs on the union of their batches in rank order; each keeps its own
// rows of the outputs. A header per rank says how many rows it brings (-1: none left to evaluate,
// it only takes part) and their shape, so batches of different sizes, and evaluation shares of
// different lengths, meet without a hang.
constexpr int kHeader = 10;  // rows, model index, dtype, ndim, up to 6 trailing sizes
constexpr std::int64_t kDone = -1;

struct Union {
  torch::Tensor rows;       // the union, in rank order
  std::int64_t offset = 0;  // where this rank's rows start
  std::int64_t count = 0;   // this rank's rows
  bool anyone = false;      // some rank brought rows (false: every rank is done)
  std::int64_t model = 0;
};

torch::Tensor header_of(const torch::Tensor& x, std::int64_t rows, std::int64_t model) {
  auto header = torch::zeros({kHeader}, torch::kLong);
  auto h = header.accessor<std::int64_t, 1>();
  h[0] = rows;
  h[1] = model;
  if (x.defined()) {
    TORCH_CHECK(x.dim() - 1 <= kHeader - 4, "tensor parallelism: a batch of ", x.dim(),
                " dimensions; at most ", kHeader - 3, " are carried");
    h[2] = static_cast<std::int64_t>(x.scalar_type());
    h[3] = x.dim();
    for (std::int64_t d = 1; d < x.dim(); ++d) h[3 + d] = x.size(d);
  } else {
    h[3] = -1;
  }
  return header;
}

Union join(comm::Communicator& group, const torch::Tensor& x, std::int64_t model) {
  const auto rows = x.defined() ? x.size(0) : kDone;
  auto headers = torch::empty({group.size(), kHeader}, torch::kLong);
  group.allgather(header_of(x, rows, model), headers);
  Union out;
  std::int64_t widest = 0;
  int shaped = -1;
  for (int r = 0; r < group.size(); ++r) {
    const auto n = headers[r][0].item<std::int64_t>();
    if (n == kDone) continue;
    out.anyone = true;
    out.model = headers[r][1].item<std::int64_t>();
    widest = std::max(widest, n);
    if (shaped < 0) shaped = r;
  }
  if (!out.anyone) return out;
  // The shape and type every rank's part takes: the first rank with rows says.
  const auto h = headers[shaped];
  const auto dtype = static_cast<c10::ScalarType>(h[2].item<std::int64_t>());
  std::vector<std::int64_t> shape{widest};
  for (std::int64_t d = 1; d < h[3].item<std::int64_t>(); ++d) shape.push_back(h[3 + d].item<std::int64_t>());
  const auto device = x.defined() ? x.device() : torch::Device(torch::kCPU);
  auto mine = torch::zeros(shape, torch::TensorOptions().dtype(dtype).device(device));
  if (x.defined() && rows > 0) mine.narrow(0, 0, rows).copy_(x);
  const auto gathered = all_gather_concat(mine, 0, group);
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < group.size(); ++r) {
    const auto n = headers[r][0].item<std::int64_t>();
    if (r == group.rank()) {
      out.offset = 0;
      for (const auto& p : parts) out.offset += p.size(0);
      out.count = std::max<std::int64_t>(n, 0);
    }
    if (n > 0) parts.push_back(gathered.narrow(0, r * widest, n));
  }
  out.rows = parts.empty() ? gathered.narrow(0, 0, 0) : torch::cat(parts);
  return out;
}

class TensorParallelStrategy : public Strategy {
 public:
  TensorParallelStrategy(std::unique_ptr<Strategy> inner, comm::CommunicatorPtr tp, AppliedPlan plan,
                         MeshShape shape)
      : inner_(std::move(inner)), tp_(std::move(tp)), plan_(std::move(plan)), shape_(shape) {}

  std::string name() const override { return inner_->name(); }

  StepResult train_step(const data::Batch& batch) override {
    const auto before = tp_->stats();
    const auto start = Clock::now();
    auto inputs = join(*tp_, batch.inputs, 0);
    auto targets = join(*tp_, batch.targets, 0);
    double communication = seconds_since(start);
    auto result = inner_->train_step({inputs.rows, targets.rows});
    const auto gather_start = Clock::now();
    if (result.outputs.defined()) result.outputs = own_rows(result.outputs, inputs);
    communication += seconds_since(gather_start);
    result.samples = batch.size();
    result.timing.communication += communication;
    result.bytes_sent += count_own_communication(tp_, before).total().wire_bytes;
    return result;
  }

  void set_learning_rate(double lr) override { inner_->set_learning_rate(lr); }
  int batches_per_step() const override { return inner_->batches_per_step(); }

  std::vector<EvalModel> eval_models() const override {
    auto models = inner_->eval_models();
    // An inner rank owns a model for each tp coordinate: the group's rank 0 stands for it.
    for (auto& m : models) {
      if (m.owner >= 0) m.owner *= shape_.tp;
    }
    return models;
  }
  void begin_evaluation() override { inner_->begin_evaluation(); }
  torch::Tensor eval_forward(std::size_t model, const torch::Tensor& inputs) override {
    auto joined = join(*tp_, inputs, static_cast<std::int64_t>(model));
    auto outputs = inner_->eval_forward(model, joined.rows);
    return outputs.defined() ? own_rows(outputs, joined) : outputs;
  }
  void end_evaluation() override {
    // Take part in the group's batches until every rank is done (Note [A tp group's batch]).
    for (;;) {
      auto joined = join(*tp_, torch::Tensor(), 0);
      if (!joined.anyone) break;
      auto outputs = inner_->eval_forward(static_cast<std::size_t>(joined.model), joined.rows);
      if (outputs.defined()) own_rows(outputs, joined);
    }
    inner_->end_evaluation();
  }

  std::map<std::string, torch::Tensor> model_state() const override {
    auto state = inner_->model_state();
    for (auto& [name, value] : state) {
      const auto it = plan_.sharded.find(name);
      if (it != plan_.sharded.end()) value = gather_whole(value, it->second);
    }
    return state;
  }

  void save(io::Checkpoint& checkpoint) const override {
    io::Checkpoint local;
    inner_->save(local);
    for (const auto& [key, value] : local.tensors()) {
      const auto* spec = spec_of(key);
      checkpoint.set_tensor(key, spec && value.dim() > spec->dim ? gather_whole(value, *spec) : value);
    }
    checkpoint.set_metadata(local.metadata());
  }

  void load(const io::Checkpoint& checkpoint) override {
    io::Checkpoint local;
    for (const auto& [key, value] : checkpoint.tensors()) {
      const auto* spec = spec_of(key);
      local.set_tensor(key, spec && value.dim() > spec->dim ? cut(key, value, *spec) : value);
    }
    local.set_metadata(checkpoint.metadata());
    inner_->load(local);
  }

  comm::CommStats comm_stats() const override {
    auto stats = inner_->comm_stats();
    stats += Strategy::comm_stats();
    return stats;
  }
  std::map<std::string, double> metrics() override { return inner_->metrics(); }
  std::map<std::string, std::string> notes() const override {
    auto notes = inner_->notes();
    notes["tensor_parallel"] = fmt::format("tp {}: {}", shape_.tp, fmt::join(plan_.modules, ", "));
    return notes;
  }
  MemoryFootprint memory_footprint() const override { return inner_->memory_footprint(); }
  MemoryFootprint planned_footprint() const override { return inner_->planned_footprint(); }

 private:
  // This rank's rows of outputs computed on a union, whole along the vocabulary.
  torch::Tensor own_rows(const torch::Tensor& outputs, const Union& joined) const {
    torch::NoGradGuard no_grad;
    auto whole = plan_.output_sharded ? all_gather_concat(outputs.detach(), -1, *tp_) : outputs;
    return whole.narrow(0, joined.offset, joined.count);
  }

  torch::Tensor gather_whole(const torch::Tensor& shard, const ShardSpec& spec) const {
    auto gathered = all_gather_concat(shard.detach().unsqueeze(0), 0, *tp_);
    return whole_of(gathered.unbind(0), spec);
  }

  torch::Tensor cut(const std::string& key, const torch::Tensor& whole, const ShardSpec& spec) const {
    if (whole.size(spec.dim) % (static_cast<std::int64_t>(spec.fused) * shape_.tp) != 0) {
      throw io::CheckpointError(fmt::format(
          "checkpoint: {} has {} rows along dimension {}, which do not split over parallel.mesh.tp {}; it "
          "was saved from another model",
          key, whole.size(spec.dim), spec.dim, shape_.tp));
    }
    return shard_of(whole, spec, tp_->rank(), shape_.tp);
  }

  // The split of a checkpoint entry: "model.<parameter>" and "optimizer/<parameter>/<field>" of a
  // split parameter; null for anything else.
  const ShardSpec* spec_of(const std::string& key) const {
    std::string parameter;
    if (key.rfind("model.", 0) == 0) {
      parameter = key.substr(6);
    } else if (key.rfind("optimizer/", 0) == 0) {
      const auto slash = key.rfind('/');
      if (slash <= 10) return nullptr;
      parameter = key.substr(10, slash - 10);
    } else {
      return nullptr;
    }
    const auto it = plan_.sharded.find(parameter);
    return it == plan_.sharded.end() ? nullptr : &it->second;
  }

  std::unique_ptr<Strategy> inner_;
  comm::CommunicatorPtr tp_;
  AppliedPlan plan_;
  MeshShape shape_;
};

// The groups a tp mesh splits the world into: this rank's tp group (consecutive ranks) and the
// ranks of its tp coordinate (the strategy's world). Every rank takes part in every split.
std::pair<comm::CommunicatorPtr, comm::CommunicatorPtr> split_groups(const comm::CommunicatorPtr& world,
                                                                     int tp) {
  const int size = world->size();
  comm::CommunicatorPtr group = tp == size ? world : nullptr;
  if (!group) {
    for (int first = 0; first < size; first += tp) {
      std::vector<int> ranks;
      for (int i = 0; i < tp; ++i) ranks.push_back(first + i);
      auto sub = world->split(ranks);
      if (sub) group = std::move(sub);
    }
  }
  comm::CommunicatorPtr rest = tp == 1 ? world : nullptr;
  if (!rest) {
    for (int c = 0; c < tp; ++c) {
      std::vector<int> ranks;
      for (int r = c; r < size; r += tp) ranks.push_back(r);
      auto sub = world->split(ranks);
      if (sub) rest = std::move(sub);
    }
  }
  return {group, rest};
}

void broadcast_model(torch::nn::Module& model, comm::Communicator& group) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    auto data = p.detach().contiguous();
    group.broadcast(data, 0);
    if (!data.is_same(p.detach())) p.detach().copy_(data);
  }
  for (auto& b : model.buffers()) {
    auto data = b.contiguous();
    group.broadcast(data, 0);
    if (!data.is_same(b)) b.copy_(data);
  }
}

}  // namespace

std::unique_ptr<Strategy> create_tensor_parallel(
    StrategyContext context, const MeshShape& shape,
    const std::function<std::unique_ptr<Strategy>(StrategyContext)>& create) {
  const int tp = shape.tp;
  if (const auto tied = models::tied_parameter_users(*context.model); !tied.empty()) {
    throw std::invalid_argument(fmt::format(
        "parallel.mesh.tp: model {} computes its output layer ({}) with its token embedding's weight (tied "
        "embeddings), which tensor parallelism would split as two layers, each its own way; set "
        "model.tie_embeddings: false (gpt; a model of one's own: untie it) or leave parallel.mesh.tp out",
        context.model->kind(), tied.front().first));
  }
  if (context.precision == optim::Precision::Fp16) {
    throw std::invalid_argument(
        "train.precision: fp16 with parallel.mesh.tp: a skipped step must be agreed over the tp group's "
        "shards "
        "too, which the loss scale does not do; use train.precision: bf16 or fp32");
  }
  {
    std::vector<torch::Tensor> probe{torch::zeros({1}, torch::requires_grad())};
    auto optimizer = context.make_optimizer(probe);
    if (dynamic_cast<torch::optim::LBFGS*>(optimizer.get())) {
      throw std::invalid_argument(
          "optim.name: lbfgs with parallel.mesh.tp: its line search needs the whole gradient, which tp ranks "
          "hold in "
          "shards; use sgd, adam or adamw");
    }
  }
  const auto& tensor = context.parallel.tensor;
  auto plan_lines =
      tensor.plan.empty() ? model_plan(*context.model, tp, tensor.sequence_parallel) : tensor.plan;
  const auto plan = parse_plan(plan_lines);
  bool has_output = false;
  for (const auto& entry : plan) has_output = has_output || entry.style == Style::Output;
  if (has_output && context.loss_name != "cross_entropy" && context.loss_name != "nll") {
    throw std::invalid_argument(
        fmt::format("parallel.tensor.plan: the style output computes the vocabulary-parallel cross-entropy, "
                    "but optim.loss is {}; use optim.loss: "
                    "cross_entropy, or give the output layer the style colwise and gather it yourself",
                    context.loss_name.empty() ? std::string("not named") : context.loss_name));
  }

  auto [group, rest] = split_groups(context.comm, tp);
  // A deferred model is built from train.seed alike on every rank, when materialized.
  if (!context.model->deferred()) broadcast_model(*context.model, *group);
  auto applied = apply_plan(*context.model, plan, tensor.sequence_parallel, group);
  if (context.model->deferred()) {
    context.model->add_cut([sharded = applied.sharded, rank = group->rank(), tp](const std::string& name,
                                                                                 const torch::Tensor& whole) {
      const auto spec = sharded.find(name);
      return spec == sharded.end() ? whole : shard_of(whole, spec->second, rank, tp);
    });
  }

  StrategyContext inner = std::move(context);
  inner.comm = rest;
  inner.parallel.mesh.tp = 0;
  inner.parallel.tensor = {};
  if (applied.output_sharded) inner.loss = vocab_parallel_cross_entropy(group);
  // Ranks of one tp coordinate train on their tp groups' unions (Note [A tp group's batch]).
  if (!inner.holder_sizes.empty()) {
    std::vector<std::int64_t> unions;
    for (std::size_t first = 0; first + tp <= inner.holder_sizes.size(); first += tp) {
      std::int64_t sum = 0;
      for (int i = 0; i < tp; ++i) sum += inner.holder_sizes[first + i];
      unions.push_back(sum);
    }
    inner.holder_sizes = std::move(unions);
  }
  auto strategy = create(std::move(inner));
  return std::make_unique<TensorParallelStrategy>(std::move(strategy), group, std::move(applied), shape);
}

}  // namespace dtrain::parallel::tensor
