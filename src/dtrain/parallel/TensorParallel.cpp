// Tensor parallelism: plans, their application to a model and the vocabulary-parallel
// cross-entropy; see Note [Tensor parallelism] in TensorParallel.h. The strategy that runs another
// over the mesh's other dimensions is in TensorParallelStrategy.cpp.
#include "dtrain/parallel/TensorParallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>
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
  if (kind != "transformer" && kind != "transformer-lm" && kind != "gpt" && kind != "vit") {
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
  if (kind == "transformer-lm" || kind == "gpt") {
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
  for (const auto& fused : whole.chunk(spec.fused, spec.dim))
    pieces.push_back(local_part(fused, spec.dim, rank, parts));
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
          throw refuse(
              dynamic_cast<torch::nn::LinearImpl*>(module.get())
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
      throw refuse(
          parts == 1
              ? fmt::format("whose {} {} do not split evenly over parallel.mesh.tp {}", size, what, tp())
              : fmt::format("whose {} {} are {} fused parts, which do not each split evenly over "
                            "parallel.mesh.tp {}",
                            size, what, parts, tp()));
    }
  }

  template <class Refuse>
  std::map<std::string, ShardSpec> colwise(models::LinearImpl& linear, const PlanEntry& entry,
                                           const Refuse& refuse) {
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
        throw std::invalid_argument(
            fmt::format("{}: \"{}\" and \"{}\" both name {}; give each module one style", kPlanKey,
                        chosen[item.key()]->text, entry.text, item.key()));
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
      throw std::invalid_argument(fmt::format(
          "{}: \"{}\" names no module of model {}; its layers include {}", kPlanKey, entry.text, model.kind(),
          names.empty() ? std::string("none a plan can split") : fmt::format("{}", fmt::join(names, ", "))));
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
    throw std::invalid_argument(fmt::format(
        "{}: {} modules have the style output; only the model's last layer, whose outputs the loss "
        "takes, can",
        kPlanKey, outputs));
  }
  applied.output_sharded = outputs == 1;
  if (sequence_parallel) {
    const auto& blocks = model.blocks();
    if (blocks.empty()) {
      throw std::invalid_argument(
          fmt::format("parallel.tensor.sequence_parallel: model {} names no blocks, the stages that would "
                      "run on sequence "
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

// Note [Vocabulary-parallel cross-entropy]
// The loss of each position is log(sum_v exp(z_v)) - z_t. Each rank holds z over its vocabulary slice: the
// maximum (for stability), the sum of exponentials and the target's logit (held by one rank, zero on the
// others) are reduced over the group, so the logits are never gathered. Backward is local: softmax minus the
// one-hot of the target, on the slice.

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
    auto target_logit =
        shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(inside.logical_not(), 0.0);
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
      throw std::invalid_argument(
          fmt::format("cross_entropy (vocabulary-parallel): expected outputs (N, V/tp) or (N, T, V/tp) with "
                      "integer targets (N) "
                      "or (N, T), found outputs ({}) and targets ({})",
                      fmt::join(outputs.sizes(), ", "), fmt::join(targets.sizes(), ", ")));
    }
    return VocabParallelCrossEntropy::apply(logits, classes.to(torch::kLong), group);
  };
}

}  // namespace dtrain::parallel::tensor
