// Per-parameter optimizer state in and out of LibTorch's optimizers (see OptimizerState.h).
#include "dtrain/optim/OptimizerState.h"

#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <set>
#include <sstream>
#include <stdexcept>

#include "dtrain/optim/ForeachOptimizers.h"
#include "dtrain/optim/Optimizers.h"
#include "dtrain/optim/StateKey.h"
#include "dtrain/util/ArchiveCode.h"

namespace dtrain::optim {
namespace {

constexpr const char* kPrefix = "optimizer/";
constexpr const char* kLbfgs = "optimizer/lbfgs";

template <class ParamState>
const ParamState* find_state(const torch::optim::Optimizer& optimizer, const torch::Tensor& parameter) {
  const auto& state = optimizer.state();
  const auto it = state.find(state_key(state, parameter));
  return it == state.end() ? nullptr : static_cast<const ParamState*>(it->second.get());
}

void put(std::map<std::string, torch::Tensor>& out, const std::string& name, const char* field,
         const torch::Tensor& value) {
  if (value.defined()) out[kPrefix + name + "/" + field] = value.detach().clone();
}

const torch::Tensor* entry(const std::map<std::string, torch::Tensor>& entries, const std::string& name,
                           const char* field) {
  const auto it = entries.find(kPrefix + name + "/" + field);
  return it == entries.end() ? nullptr : &it->second;
}

const torch::Tensor& required(const std::map<std::string, torch::Tensor>& entries, const std::string& name,
                              const char* field) {
  const auto* value = entry(entries, name, field);
  if (!value) {
    throw std::invalid_argument(fmt::format(
        "checkpoint: optimizer state of {} has a step but no {}; the file is incomplete", name, field));
  }
  return *value;
}

torch::Tensor fitted(const torch::Tensor& value, const torch::Tensor& parameter, const std::string& name,
                     const char* field) {
  if (value.sizes() != parameter.sizes()) {
    throw std::invalid_argument(
        fmt::format("checkpoint: optimizer state {}/{} has shape {}, the parameter {}", name, field,
                    c10::str(value.sizes()), c10::str(parameter.sizes())));
  }
  return value.to(parameter.options()).clone();
}

template <class ParamState>
void save_adam_like(const torch::optim::Optimizer& optimizer, const NamedParameters& parameters,
                    std::map<std::string, torch::Tensor>& out) {
  for (const auto& [name, p] : parameters) {
    const auto* s = find_state<ParamState>(optimizer, p);
    if (!s) continue;
    out[kPrefix + name + "/step"] = torch::tensor(static_cast<std::int64_t>(s->step()));
    put(out, name, "exp_avg", s->exp_avg());
    put(out, name, "exp_avg_sq", s->exp_avg_sq());
    put(out, name, "max_exp_avg_sq", s->max_exp_avg_sq());
  }
}

template <class ParamState>
void load_adam_like(torch::optim::Optimizer& optimizer, const NamedParameters& parameters,
                    const std::map<std::string, torch::Tensor>& entries) {
  auto& state = optimizer.state();
  for (const auto& [name, p] : parameters) {
    const auto* step = entry(entries, name, "step");
    if (!step) continue;
    auto s = std::make_unique<ParamState>();
    s->step(step->template item<std::int64_t>());
    s->exp_avg(fitted(required(entries, name, "exp_avg"), p, name, "exp_avg"));
    s->exp_avg_sq(fitted(required(entries, name, "exp_avg_sq"), p, name, "exp_avg_sq"));
    if (const auto* m = entry(entries, name, "max_exp_avg_sq"))
      s->max_exp_avg_sq(fitted(*m, p, name, "max_exp_avg_sq"));
    state[state_key(state, p)] = std::move(s);
  }
}

torch::Tensor archive_bytes(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  save_optimizer_state(optimizer, archive, "optimizer");
  std::ostringstream bytes;
  archive.save_to(bytes);
  const auto text = bytes.str();
  return torch::from_blob(const_cast<char*>(text.data()), {static_cast<std::int64_t>(text.size())},
                          torch::kUInt8)
      .clone();
}

void load_archive_bytes(torch::optim::Optimizer& optimizer, const torch::Tensor& bytes) {
  const auto b = bytes.contiguous().cpu();
  // The state lands where the parameters live, whichever device it was saved from.
  c10::optional<torch::Device> device;
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) {
      device = group.params().front().device();
      break;
    }
  }
  std::istringstream in(
      std::string(static_cast<const char*>(b.data_ptr()), static_cast<std::size_t>(b.numel())));
  torch::serialize::InputArchive archive;
  util::load_archive_without_code(archive, in, "the checkpoint's L-BFGS optimizer state", device);
  load_optimizer_state(optimizer, archive, "optimizer");
}

}  // namespace

std::map<std::string, torch::Tensor> named_optimizer_state(const torch::optim::Optimizer& optimizer,
                                                           const NamedParameters& parameters) {
  std::map<std::string, torch::Tensor> out;
  settle_step_counts(optimizer);  // fused Adam counts its steps on the device
  if (dynamic_cast<const torch::optim::LBFGS*>(&optimizer)) {
    out[kLbfgs] = archive_bytes(optimizer);
  } else if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) {
    save_adam_like<torch::optim::AdamWParamState>(optimizer, parameters, out);
  } else if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) {
    save_adam_like<torch::optim::AdamParamState>(optimizer, parameters, out);
  } else if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) {
    for (const auto& [name, p] : parameters) {
      if (const auto* s = find_state<torch::optim::SGDParamState>(optimizer, p)) {
        put(out, name, "momentum_buffer", s->momentum_buffer());
      }
    }
  } else {
    TORCH_INTERNAL_ASSERT(false, "named_optimizer_state: an optimizer dtrain does not build");
  }
  return out;
}

void load_named_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParameters& parameters,
                                const std::map<std::string, torch::Tensor>& entries) {
  // Checkpoints written before the named form hold LibTorch's archive of any optimizer under
  // "optimizer"; they load into the same optimizer over the same parameters.
  if (const auto legacy = entries.find("optimizer"); legacy != entries.end()) {
    load_archive_bytes(optimizer, legacy->second);
    return;
  }
  const bool has_lbfgs = entries.count(kLbfgs) > 0;
  const bool is_lbfgs = dynamic_cast<const torch::optim::LBFGS*>(&optimizer) != nullptr;
  if (has_lbfgs != is_lbfgs && !entries.empty()) {
    throw std::invalid_argument(fmt::format(
        "checkpoint: its optimizer state is {}lbfgs's, this run's optimizer is {}lbfgs; resume with "
        "the optimizer it was saved with",
        has_lbfgs ? "" : "not ", is_lbfgs ? "" : "not "));
  }
  optimizer.state().clear();
  forget_step_counts(optimizer);
  if (is_lbfgs) {
    if (has_lbfgs) load_archive_bytes(optimizer, entries.at(kLbfgs));
  } else if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) {
    load_adam_like<torch::optim::AdamWParamState>(optimizer, parameters, entries);
  } else if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) {
    load_adam_like<torch::optim::AdamParamState>(optimizer, parameters, entries);
  } else {
    auto& state = optimizer.state();
    for (const auto& [name, p] : parameters) {
      const auto* m = entry(entries, name, "momentum_buffer");
      if (!m) continue;
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(fitted(*m, p, name, "momentum_buffer"));
      state[state_key(state, p)] = std::move(s);
    }
  }
}

std::vector<torch::Tensor> optimizer_state_tensors(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> out;
  for (const auto& entry : optimizer.state()) {
    const auto* state = entry.second.get();
    if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
      out.push_back(s->momentum_buffer());
    } else if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
      out.insert(out.end(), {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()});
    } else if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
      out.insert(out.end(), {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()});
    } else if (const auto* s = dynamic_cast<const torch::optim::LBFGSParamState*>(state)) {
      out.insert(out.end(), {s->d(), s->H_diag(), s->prev_flat_grad()});
      for (const auto* history : {&s->old_dirs(), &s->old_stps(), &s->ro()})
        out.insert(out.end(), history->begin(), history->end());
      if (s->al()) out.insert(out.end(), s->al()->begin(), s->al()->end());
    }
  }
  return out;
}

std::uint64_t planned_optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  std::uint64_t bytes = 0;
  for (const auto& group : optimizer.param_groups()) {
    std::uint64_t parameters = 0;
    for (const auto& p : group.params()) parameters += p.numel() * p.element_size();
    const auto* options = &group.options();
    std::uint64_t copies = 0;
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(options)) {
      copies = sgd->momentum() != 0.0 ? 1 : 0;
    } else if (const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(options)) {
      copies = adam->amsgrad() ? 3 : 2;
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(options)) {
      copies = adamw->amsgrad() ? 3 : 2;
    } else if (const auto* lbfgs = dynamic_cast<const torch::optim::LBFGSOptions*>(options)) {
      copies = 2 * static_cast<std::uint64_t>(lbfgs->history_size()) + 3;
    }
    bytes += copies * parameters;
  }
  return bytes;
}

std::uint64_t unique_storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::set<const void*> seen;
  std::uint64_t bytes = 0;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    const auto& storage = t.storage();
    if (seen.insert(storage.unsafeGetStorageImpl()).second) bytes += storage.nbytes();
  }
  return bytes;
}

}  // namespace dtrain::optim
