// Tensor parallelism: plans, their application to a model, the vocabulary-parallel cross-entropy,
// and the strategy that runs another over the mesh's other dimensions; see Note [Tensor
// parallelism] in TensorParallel.h.
#include "dtrain/parallel/TensorParallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>
#include <torch/optim/lbfgs.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "dtrain/models/Layers.h"
#include "dtrain/models/Linear.h"
#include "dtrain/models/TransformerBlocks.h"
#include "dtrain/parallel/TensorOps.h"

namespace dtrain::parallel::tensor {

namespace {

constexpr const char* kPlanKey = "parallel.tensor.plan";

const char* style_name(Style style) {
  switch (style) {
    case Style::Colwise:
      return "colwise";
    case Style::Rowwise:
      return "rowwise";
    case Style::Embedding:
      return "embedding";
    case Style::Output:
      return "output";
    case Style::Sequence:
      return "sequence";
  }
  return "?";
}

std::vector<std::string> split_name(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream in(name);
  std::string part;
  while (std::getline(in, part, '.')) parts.push_back(part);
  return parts;
}

bool matches(const std::string& pattern, const std::string& name) {
  const auto p = split_name(pattern);
  const auto n = split_name(name);
  if (p.size() != n.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] != "*" && p[i] != n[i]) return false;
  }
  return true;
}

}  // namespace

std::vector<PlanEntry> parse_plan(const std::vector<std::string>& lines) {
  std::vector<PlanEntry> plan;
  for (const auto& line : lines) {
    const auto eq = line.find('=');
    const auto fail = [&](const std::string& why) {
      return std::invalid_argument(fmt::format(
          "{}: entry \"{}\" {}; write \"<module pattern>=<style>\" with a style among colwise, colwise:K, "
          "rowwise, embedding, output and sequence",
          kPlanKey, line, why));
    };
    if (eq == std::string::npos || eq == 0 || eq + 1 == line.size()) throw fail("is not <pattern>=<style>");
    PlanEntry entry;
    entry.pattern = line.substr(0, eq);
    entry.text = line;
    auto style = line.substr(eq + 1);
    if (style.rfind("colwise:", 0) == 0) {
      const auto k = style.substr(8);
      if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos || k.size() > 3 ||
          std::stoi(k) < 1) {
        throw fail("has a fused count that is not a positive integer");
      }
      entry.style = Style::Colwise;
      entry.fused = std::stoi(k);
    } else if (style == "colwise") {
      entry.style = Style::Colwise;
    } else if (style == "rowwise") {
      entry.style = Style::Rowwise;
    } else if (style == "embedding") {
      entry.style = Style::Embedding;
    } else if (style == "output") {
      entry.style = Style::Output;
    } else if (style == "sequence") {
      entry.style = Style::Sequence;
    } else {
      throw fail(fmt::format("has the unknown style \"{}\"", style));
    }
    plan.push_back(std::move(entry));
  }
  return plan;
}

std::vector<std::string> model_plan(const models::Network& model, int tp, bool sequence_parallel) {
  const auto& kind = model.kind();
  if (kind != "transformer" && kind != "transformer-lm" && kind != "vit") {
    throw std::invalid_argument(fmt::format(
        "{}: empty, and model {} has no tensor-parallel plan of its own (transformer and vit have); list "
        "its modules' styles, e.g. [\"layers.*.fc1=colwise\", \"layers.*.fc2=rowwise\"]",
        kPlanKey, kind));
  }
  std::vector<std::string> plan;
  auto layers = model.layers();
  for (const auto b : model.blocks()) {
    const auto prefix = fmt::format("layers.{}.", b);
    for (const auto& item : layers[b]->named_modules("", false)) {
      if (const auto* attention = dynamic_cast<const models::SelfAttentionImpl*>(item.value().get())) {
        if (attention->heads() % tp != 0) {
          throw std::invalid_argument(fmt::format(
              "model.heads: {} attention heads do not split over parallel.mesh.tp {}; choose heads as a "
              "multiple of tp",
              attention->heads(), tp));
        }
      }
    }
    plan.push_back(prefix + "attention.qkv=colwise:3");
    plan.push_back(prefix + "attention.projection=rowwise");
    plan.push_back(prefix + "fc1=colwise");
    plan.push_back(prefix + "fc2=rowwise");
    if (sequence_parallel) {
      plan.push_back(prefix + "norm1=sequence");
      plan.push_back(prefix + "norm2=sequence");
    }
  }
  // Token models: the vocabulary of the embedding, and of a language model's output layer, where tp
  // divides it (a character vocabulary often is not; those layers then stay whole on every rank).
  for (const auto& item : model.named_modules("", false)) {
    const auto* embedding = dynamic_cast<const models::EmbeddingImpl*>(item.value().get());
    if (embedding && embedding->weight.size(0) % tp == 0) plan.push_back(item.key() + "=embedding");
  }
  if (kind == "transformer-lm") {
    const auto head = fmt::format("layers.{}.fc", layers->size() - 1);
    for (const auto& item : model.named_modules("", false)) {
      const auto* linear = dynamic_cast<const models::LinearImpl*>(item.value().get());
      if (item.key() == head && linear && linear->weight.size(0) % tp == 0) plan.push_back(head + "=output");
    }
  }
  return plan;
}

at::Tensor shard_of(const at::Tensor& whole, const ShardSpec& spec, int rank, int parts) {
  if (spec.fused == 1) return local_part(whole, spec.dim, rank, parts).contiguous();
  std::vector<at::Tensor> pieces;
  for (const auto& fused : whole.chunk(spec.fused, spec.dim)) pieces.push_back(local_part(fused, spec.dim, rank, parts));
  return torch::cat(pieces, spec.dim).contiguous();
}

at::Tensor whole_of(const std::vector<at::Tensor>& shards, const ShardSpec& spec) {
  if (spec.fused == 1) return torch::cat(shards, spec.dim);
  std::vector<std::vector<at::Tensor>> by_part(static_cast<std::size_t>(spec.fused));
  for (const auto& shard : shards) {
    const auto pieces = shard.chunk(spec.fused, spec.dim);
    for (int k = 0; k < spec.fused; ++k) by_part[k].push_back(pieces[k]);
  }
  std::vector<at::Tensor> parts;
  for (const auto& pieces : by_part) parts.push_back(torch::cat(pieces, spec.dim));
  return torch::cat(parts, spec.dim);
}

namespace {

// Applies one entry's style to one module; returns the parameters it split (name within the module).
class PlanApplier {
 public:
  PlanApplier(bool sequence_parallel, comm::CommunicatorPtr group)
      : sequence_parallel_(sequence_parallel), group_(std::move(group)) {}

  std::map<std::string, ShardSpec> apply(const PlanEntry& entry, const std::string& name,
                                         const std::shared_ptr<torch::nn::Module>& module) {
    const auto refuse = [&](const std::string& why) {
      return std::invalid_argument(fmt::format("{}: \"{}\" names {}, {}", kPlanKey, entry.text, name, why));
    };
    switch (entry.style) {
      case Style::Colwise:
      case Style::Output:
      case Style::Rowwise: {
        auto* linear = dynamic_cast<models::LinearImpl*>(module.get());
        if (!linear) {
          throw refuse(dynamic_cast<torch::nn::LinearImpl*>(module.get())
                           ? "a torch::nn::Linear: LibTorch's modules have no forward hooks to run a shard with, "
                             "so build it as dtrain::models::Linear (the same parameters and names)"
                           : "which is not a Linear layer (dtrain::models::Linear)");
        }
        return entry.style == Style::Rowwise ? rowwise(*linear, refuse) : colwise(*linear, entry, refuse);
      }
      case Style::Embedding: {
        auto* embedding = dynamic_cast<models::EmbeddingImpl*>(module.get());
        if (!embedding) throw refuse("which is not an embedding (dtrain::models::Embedding)");
        return vocabulary(*embedding, refuse);
      }
      case Style::Sequence: {
        auto* norm = dynamic_cast<models::LayerNormImpl*>(module.get());
        if (!norm) throw refuse("which is not a LayerNorm (dtrain::models::LayerNorm)");
        if (!sequence_parallel_) {
          throw refuse("but parallel.tensor.sequence_parallel is false; set it, or leave the entry out");
        }
        return sequence(*norm);
      }
    }
    return {};
  }

 private:
  int tp() const { return group_->size(); }
  int rank() const { return group_->rank(); }

  void keep_shard(torch::Tensor& parameter, const ShardSpec& spec) {
    torch::NoGradGuard no_grad;
    parameter.set_data(shard_of(parameter.detach(), spec, rank(), tp()).clone());
  }

  template <class Refuse>
  void check_divides(std::int64_t size, int parts, const char* what, const Refuse& refuse) {
    if (size % (static_cast<std::int64_t>(parts) * tp()) != 0) {
      throw refuse(fmt::format("whose {} {} do not split into {} equal parts per rank over parallel.mesh.tp {}", size,
                               what, parts, tp()));
    }
  }

  template <class Refuse>
  std::map<std::string, ShardSpec> colwise(models::LinearImpl& linear, const PlanEntry& entry, const Refuse& refuse) {
    check_divides(linear.weight.size(0), entry.fused, "output features", refuse);
    const ShardSpec spec{0, entry.fused};
    std::map<std::string, ShardSpec> split{{"weight", spec}};
    keep_shard(linear.weight, spec);
    if (linear.bias.defined()) {
      keep_shard(linear.bias, spec);
      split["bias"] = spec;
    }
    auto* self = &linear;
    auto group = group_;
    const bool sequence = sequence_parallel_ && entry.style == Style::Colwise;
    linear.set_forward([self, group, sequence](const torch::Tensor& x) {
      auto input = sequence ? gather_reduce_scatter_along(x, 1, group) : copy_to_group(x, group);
      return torch::nn::functional::linear(input, self->weight, self->bias);
    });
    return split;
  }

  template <class Refuse>
  std::map<std::string, ShardSpec> rowwise(models::LinearImpl& linear, const Refuse& refuse) {
    check_divides(linear.weight.size(1), 1, "input features", refuse);
    const ShardSpec spec{1, 1};
    keep_shard(linear.weight, spec);
    auto* self = &linear;
    auto group = group_;
    const bool sequence = sequence_parallel_;
    linear.set_forward([self, group, sequence](const torch::Tensor& x) {
      auto partial = torch::nn::functional::linear(x, self->weight);
      auto y = sequence ? reduce_scatter_along(partial, 1, group) : reduce_from_group(partial, group);
      if (!self->bias.defined()) return y;
      return y + (sequence ? copy_to_group(self->bias, group) : self->bias);
    });
    return {{"weight", spec}};
  }

  template <class Refuse>
  std::map<std::string, ShardSpec> vocabulary(models::EmbeddingImpl& embedding, const Refuse& refuse) {
    if (embedding.options.padding_idx() || embedding.options.max_norm()) {
      throw refuse("an embedding with padding_idx or max_norm, which a vocabulary shard cannot honour");
    }
    check_divides(embedding.weight.size(0), 1, "vocabulary rows", refuse);
    const ShardSpec spec{0, 1};
    keep_shard(embedding.weight, spec);
    auto* self = &embedding;
    auto group = group_;
    const auto rows = embedding.weight.size(0);
    const auto first = rows * rank();
    embedding.set_forward([self, group, rows, first](const torch::Tensor& ids) {
      const auto outside = (ids < first).logical_or(ids >= first + rows);
      const auto local = (ids - first).masked_fill(outside, 0);
      auto looked_up = torch::nn::functional::embedding(local, self->weight);
      looked_up = looked_up.masked_fill(outside.unsqueeze(-1), 0.0);
      return reduce_from_group(looked_up, group);
    });
    return {{"weight", spec}};
  }

  std::map<std::string, ShardSpec> sequence(models::LayerNormImpl& norm) {
    auto* self = &norm;
    auto group = group_;
    norm.set_forward([self, group](const torch::Tensor& x) {
      const auto& o = self->options;
      auto weight = self->weight.defined() ? copy_to_group(self->weight, group) : torch::Tensor();
      auto bias = self->bias.defined() ? copy_to_group(self->bias, group) : torch::Tensor();
      return torch::layer_norm(x, o.normalized_shape(), weight, bias, o.eps());
    });
    return {};
  }

  bool sequence_parallel_;
  comm::CommunicatorPtr group_;
};

}  // namespace

AppliedPlan apply_plan(models::Network& model, const std::vector<PlanEntry>& plan, bool sequence_parallel,
                       const comm::CommunicatorPtr& group) {
  AppliedPlan applied;
  PlanApplier applier(sequence_parallel, group);
  const auto modules = model.named_modules("", false);
  std::map<std::string, const PlanEntry*> chosen;
  for (const auto& entry : plan) {
    bool found = false;
    for (const auto& item : modules) {
      if (!matches(entry.pattern, item.key())) continue;
      found = true;
      if (chosen.count(item.key())) {
        throw std::invalid_argument(fmt::format("{}: \"{}\" and \"{}\" both name {}; give each module one style",
                                                kPlanKey, chosen[item.key()]->text, entry.text, item.key()));
      }
      chosen[item.key()] = &entry;
    }
    if (!found) {
      std::vector<std::string> names;
      for (const auto& item : modules) {
        if (dynamic_cast<models::LinearImpl*>(item.value().get()) ||
            dynamic_cast<models::EmbeddingImpl*>(item.value().get()) ||
            dynamic_cast<models::LayerNormImpl*>(item.value().get())) {
          names.push_back(item.key());
        }
        if (names.size() == 6) break;
      }
      throw std::invalid_argument(fmt::format("{}: \"{}\" names no module of model {}; its layers include {}",
                                              kPlanKey, entry.text, model.kind(),
                                              names.empty() ? std::string("none a plan can split")
                                                            : fmt::format("{}", fmt::join(names, ", "))));
    }
  }
  int outputs = 0;
  for (const auto& item : modules) {
    const auto it = chosen.find(item.key());
    if (it == chosen.end()) continue;
    const auto& entry = *it->second;
    for (const auto& [parameter, spec] : applier.apply(entry, item.key(), item.value())) {
      applied.sharded[item.key() + "." + parameter] = spec;
    }
    if (entry.style == Style::Output) ++outputs;
    applied.modules.push_back(item.key() + " " + style_name(entry.style) +
                              (entry.fused > 1 ? fmt::format(":{}", entry.fused) : std::string()));
  }
  if (outputs > 1) {
    throw std::invalid_argument(
        fmt::format("{}: {} modules have the style output; only the model's last layer, whose outputs the loss "
                    "takes, can",
                    kPlanKey, outputs));
  }
  applied.output_sharded = outputs == 1;
  if (sequence_parallel) {
    const auto& blocks = model.blocks();
    if (blocks.empty()) {
      throw std::invalid_argument(fmt::format(
          "parallel.tensor.sequence_parallel: model {} names no blocks, the stages that would run on sequence "
          "slices",
          model.kind()));
    }
    auto g = group;
    model.set_stage_input(blocks.front(), [g](const torch::Tensor& x) {
      TORCH_CHECK(x.dim() >= 3, "parallel.tensor.sequence_parallel: a block's input has ", x.dim(),
                  " dimensions; sequence parallelism splits (N, T, ...) along T");
      return split_along(x, 1, g);
    });
    model.set_stage_output(blocks.back(), [g](const torch::Tensor& x) { return gather_along(x, 1, g); });
  }
  return applied;
}

namespace {

// Note [Vocabulary-parallel cross-entropy]: the loss of each position is log(sum_v exp(z_v)) - z_t.
// Each rank holds z over its vocabulary slice: the maximum (for stability), the sum of exponentials
// and the target's logit (held by one rank, zero on the others) are reduced over the group, so the
// logits are never gathered. Backward is local: softmax minus the one-hot of the target, on the slice.
struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(comm::CommunicatorPtr c) : comm(std::move(c)) {}
  comm::CommunicatorPtr comm;
};

class VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, const comm::CommunicatorPtr& group) {
    const auto slice = logits.size(1);
    const auto first = slice * group->rank();
    auto z = logits.detach();
    auto max = std::get<0>(z.max(1)).contiguous();
    group->allreduce(max, comm::ReduceOp::Max);
    auto shifted = z - max.unsqueeze(1);
    auto exp = shifted.exp();
    const auto inside = (targets >= first).logical_and(targets < first + slice);
    const auto local = (targets - first).masked_fill(inside.logical_not(), 0);
    auto target_logit = shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(inside.logical_not(), 0.0);
    auto sums = torch::stack({exp.sum(1), target_logit}).contiguous();
    group->allreduce(sums);
    auto sum = sums[0];
    auto softmax = exp / sum.unsqueeze(1);
    ctx->save_for_backward({softmax, local, inside});
    return (sum.log() - sums[1]).mean();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto grad = saved[0].clone();
    const auto rows = grad.size(0);
    const auto inside = saved[2].to(grad.scalar_type());
    grad.scatter_add_(1, saved[1].unsqueeze(1), (-inside).unsqueeze(1));
    grad.mul_(grads[0] / static_cast<double>(rows));
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

optim::LossFn vocab_parallel_cross_entropy(comm::CommunicatorPtr group) {
  return [group](const at::Tensor& outputs, const at::Tensor& targets) {
    const bool sequence = outputs.dim() == 3 && targets.dim() == 2;
    const auto logits = sequence ? outputs.reshape({-1, outputs.size(-1)}) : outputs;
    const auto classes = sequence ? targets.reshape({-1}) : targets;
    if (logits.dim() != 2 || classes.dim() != 1 || classes.size(0) != logits.size(0) ||
        at::isFloatingType(classes.scalar_type())) {
      throw std::invalid_argument(fmt::format(
          "cross_entropy (vocabulary-parallel): expected outputs (N, V/tp) or (N, T, V/tp) with integer targets (N) "
          "or (N, T), found outputs ({}) and targets ({})",
          fmt::join(outputs.sizes(), ", "), fmt::join(targets.sizes(), ", ")));
    }
    return VocabParallelCrossEntropy::apply(logits, classes.to(torch::kLong), group);
  };
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Note [A tp group's batch]: ranks of a tp group compute one forward together, so each step (and
// each evaluation batch) runs on the union of their batches in rank order; each keeps its own
// rows of the outputs. A header per rank says how many rows it brings (-1: none left to evaluate,
// it only takes part) and their shape, so batches of different sizes, and evaluation shares of
// different lengths, meet without a hang.
constexpr int kHeader = 10;  // rows, model index, dtype, ndim, up to 6 trailing sizes
constexpr std::int64_t kDone = -1;

struct Union {
  torch::Tensor rows;         // the union, in rank order
  std::int64_t offset = 0;    // where this rank's rows start
  std::int64_t count = 0;     // this rank's rows
  bool anyone = false;        // some rank brought rows (false: every rank is done)
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

std::unique_ptr<Strategy> create_tensor_parallel(StrategyContext context, const MeshShape& shape,
                                                 const std::function<std::unique_ptr<Strategy>(StrategyContext)>& create) {
  const int tp = shape.tp;
  if (context.precision == optim::Precision::Fp16) {
    throw std::invalid_argument(
        "train.precision: fp16 with parallel.mesh.tp: a skipped step must be agreed over the tp group's shards "
        "too, which the loss scale does not do; use train.precision: bf16 or fp32");
  }
  {
    std::vector<torch::Tensor> probe{torch::zeros({1}, torch::requires_grad())};
    auto optimizer = context.make_optimizer(probe);
    if (dynamic_cast<torch::optim::LBFGS*>(optimizer.get())) {
      throw std::invalid_argument(
          "optim.name: lbfgs with parallel.mesh.tp: its line search needs the whole gradient, which tp ranks hold in "
          "shards; use sgd, adam or adamw");
    }
  }
  const auto& tensor = context.parallel.tensor;
  auto plan_lines = tensor.plan.empty() ? model_plan(*context.model, tp, tensor.sequence_parallel) : tensor.plan;
  const auto plan = parse_plan(plan_lines);
  bool has_output = false;
  for (const auto& entry : plan) has_output = has_output || entry.style == Style::Output;
  if (has_output && context.loss_name != "cross_entropy" && context.loss_name != "nll") {
    throw std::invalid_argument(fmt::format(
        "{}: the style output computes the vocabulary-parallel cross-entropy, but optim.loss is {}; use optim.loss: "
        "cross_entropy, or give the output layer the style colwise and gather it yourself",
        kPlanKey, context.loss_name.empty() ? std::string("not named") : context.loss_name));
  }

  auto [group, rest] = split_groups(context.comm, tp);
  broadcast_model(*context.model, *group);
  auto applied = apply_plan(*context.model, plan, tensor.sequence_parallel, group);

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
