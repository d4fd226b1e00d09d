// The problem_configs: section of DiNNO's file: each problem as the overrides of one
// decentralized run (batch sizes, evaluation cadence, rounds, and its algorithm's settings under
// parallel.decentralized.*). See Note [DiNNO's experiment file].
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "dtrain/config/ValueText.h"
#include "dtrain/config/YamlFile.h"
#include "dtrain/experiment/DinnoExperiment.h"
#include "dtrain/experiment/DinnoSection.h"
#include "dtrain/parallel/decentralized/DecentralizedOptions.h"

namespace dtrain::experiment {
namespace {

using Overrides = std::vector<std::string>;

std::string flag(bool b) {
  return b ? "true" : "false";
}

const std::string kAlg = "parallel.decentralized.";

// cadmm and dinno (the same algorithm): the primal learning rate as the template (primal_lr, constant)
// or the later form (primal_lr_start, primal_lr_finish, lr_decay_type) gives it.
void read_cadmm(DinnoSection& opt, Overrides& out) {
  out.push_back(kAlg + "algorithm=cadmm");
  out.push_back(kAlg + "rho_init=" + opt.number("rho_init"));
  out.push_back(kAlg + "rho_scaling=" + opt.number("rho_scaling"));
  out.push_back(kAlg + "primal_iterations=" + std::to_string(opt.count("primal_iterations")));
  // The primal optimizer is dtrain's optimizer of the run, its rate the run's schedule (constant,
  // linear or log from start to finish over the rounds, as numpy's linspace/logspace there).
  out.push_back("optim.name=" + opt.choice("primal_optimizer", {"adam", "adamw", "sgd"}));
  if (opt.has("primal_lr") || !opt.has("primal_lr_start")) {
    if (opt.has("primal_lr_start"))
      opt.reject("primal_lr_start", "give primal_lr or primal_lr_start, not both");
    out.insert(out.end(), {"optim.lr=" + opt.number("primal_lr"), "optim.scheduler.name=constant"});
  } else {
    const auto start = opt.number("primal_lr_start");
    const auto decay = opt.choice("lr_decay_type", {"constant", "linear", "log"});
    out.insert(out.end(), {"optim.lr=" + start, "optim.scheduler.name=" + decay});
    if (decay == "constant") {
      if (opt.has("primal_lr_finish"))
        opt.reject("primal_lr_finish",
                   "lr_decay_type constant keeps primal_lr_start throughout; leave it out");
    } else {
      out.push_back("optim.scheduler.final_lr=" + opt.number("primal_lr_finish"));
    }
  }
  const bool persistent = opt.has("persistant_primal_opt") && opt.boolean("persistant_primal_opt");
  out.push_back(kAlg + "persistent_primal_optimizer=" + flag(persistent));
}

// dsgd: the authors' decaying step alpha_k = alpha_{k-1} (1 - mu alpha_{k-1}) from alpha0, or the
// template's constant lr.
void read_dsgd(DinnoSection& opt, Overrides& out) {
  out.insert(out.end(), {kAlg + "algorithm=dsgd", "optim.name=sgd"});
  if (opt.has("lr") && !opt.has("alpha0")) {
    if (opt.has("mu")) opt.reject("mu", "mu decays alpha0; with lr (a constant rate) leave it out");
    out.push_back("optim.lr=" + opt.number("lr"));
    out.push_back("optim.scheduler.name=constant");
    return;
  }
  if (opt.has("lr"))
    opt.reject("lr", "give alpha0 and mu (a decaying rate) or lr (a constant one), not both");
  out.push_back("optim.lr=" + opt.number("alpha0"));
  out.push_back("optim.scheduler.name=inverse");
  out.push_back("optim.scheduler.mu=" + opt.number("mu"));
}

void read_dsgt(DinnoSection& opt, Overrides& out) {
  out.insert(out.end(), {kAlg + "algorithm=dsgt", "optim.name=sgd", "optim.lr=" + opt.number("alpha")});
  const bool init = opt.has("init_grads") && opt.boolean("init_grads");
  out.push_back(kAlg + "init_grads=" + flag(init));
}

// choco: ratio belongs to the sparsifying compressors, bits to qbit; either given elsewhere is refused
// rather than ignored.
void read_choco(DinnoSection& opt, Overrides& out) {
  out.insert(out.end(), {kAlg + "algorithm=choco", "optim.name=sgd", "optim.lr=" + opt.number("lr"),
                         kAlg + "consensus_step=" + opt.fraction("gamma")});
  const auto name = opt.choice("compressor", {"topk", "randomk", "sign", "qbit", "identity"});
  out.push_back(kAlg + "compressor=" + name);
  const auto compressor = parallel::kCompressorNames.parse(name, "compressor");
  const bool sparse =
      compressor == parallel::CompressorKind::TopK || compressor == parallel::CompressorKind::RandomK;
  if (sparse) {
    out.push_back(kAlg + "compression_ratio=" + opt.fraction("ratio"));
  } else if (opt.has("ratio")) {
    opt.reject("ratio", "applies to topk and randomk only; remove it for compressor " + name);
  }
  if (compressor == parallel::CompressorKind::QBit) {
    out.push_back(kAlg + "bits=" + std::to_string(opt.count("bits")));
  } else if (opt.has("bits")) {
    opt.reject("bits", "applies to compressor qbit only; remove it for compressor " + name);
  }
}

// The keys optimizer_config may hold for each algorithm, after alg_name, outer_iterations, profile;
// none for an unknown algorithm, whose alg_name is the error to report rather than its keys.
std::vector<std::string> algorithm_keys(const std::string& alg) {
  if (alg != "cadmm" && alg != "dinno" && alg != "dsgd" && alg != "dsgt" && alg != "choco") return {};
  std::vector<std::string> keys{"alg_name", "outer_iterations", "profile"};
  std::vector<std::string> own;
  if (alg == "cadmm" || alg == "dinno") {
    own = {"rho_init",        "rho_scaling",      "primal_iterations", "primal_optimizer",     "primal_lr",
           "primal_lr_start", "primal_lr_finish", "lr_decay_type",     "persistant_primal_opt"};
  } else if (alg == "dsgd") {
    own = {"alpha0", "mu", "lr"};
  } else if (alg == "dsgt") {
    own = {"alpha", "init_grads"};
  } else if (alg == "choco") {
    own = {"lr", "gamma", "compressor", "ratio", "bits"};
  }
  keys.insert(keys.end(), own.begin(), own.end());
  return keys;
}

void read_optimizer(DinnoSection& problem, Overrides& out) {
  const YAML::Node node = problem.node()["optimizer_config"];
  // A const node's missing key is an invalid node, whose Is*() throw YAML::InvalidNode: test each
  // with operator bool first (a missing alg_name is reported by choice() below).
  std::string alg_text;
  if (node && node.IsMap()) {
    if (const YAML::Node alg_name = node["alg_name"]; alg_name && alg_name.IsScalar())
      alg_text = alg_name.Scalar();
  }
  for (auto& c : alg_text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto opt = problem.section("optimizer_config", algorithm_keys(alg_text));
  const auto alg = opt.choice("alg_name", {"cadmm", "dinno", "dsgd", "dsgt", "choco"});
  out.push_back("train.max_steps=" + std::to_string(opt.count("outer_iterations")));
  if (opt.has("profile") && opt.boolean("profile"))
    opt.reject("profile", "dtrain writes no torch.profiler trace; set profile: false");
  if (alg == "cadmm" || alg == "dinno") read_cadmm(opt, out);
  if (alg == "dsgd") read_dsgd(opt, out);
  if (alg == "dsgt") read_dsgt(opt, out);
  if (alg == "choco") read_choco(opt, out);
  opt.finish();
}

std::vector<std::string> read_metrics(DinnoSection& problem) {
  const auto list = problem.required("metrics");
  if (!list.IsSequence() || list.size() == 0)
    problem.reject("metrics", "expected a non-empty list of " + config::detail::join(dinno_metric_names()));
  std::vector<std::string> metrics;
  for (const auto& item : list) {
    const auto& names = dinno_metric_names();
    const std::string name = item.IsScalar() ? item.Scalar() : "";
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      problem.reject_node(item, problem.dotted("metrics"),
                          "expected one of " + config::detail::join(names) + ", found \"" + name + "\"");
    }
    if (std::find(metrics.begin(), metrics.end(), name) != metrics.end())
      problem.reject_node(item, problem.dotted("metrics"), "\"" + name + "\" is listed twice");
    metrics.push_back(name);
  }
  return metrics;
}

// evaluate_frequency: the template's own key, or the later metrics_config.evaluate_frequency.
std::int64_t read_frequency(DinnoSection& problem) {
  if (problem.has("metrics_config")) {
    if (problem.has("evaluate_frequency"))
      problem.reject("evaluate_frequency", "also given as metrics_config.evaluate_frequency; give it once");
    auto config = problem.section("metrics_config", {"evaluate_frequency"});
    const auto every = config.count("evaluate_frequency");
    config.finish();
    return every;
  }
  return problem.count("evaluate_frequency");
}

RunSpec read_problem(DinnoSection problem, DinnoForm& form) {
  DinnoProblem p;
  p.name = problem.text("problem_name");
  if (!is_folder_name(p.name)) {
    problem.reject("problem_name",
                   "expected a name of letters, digits, '.', '_', '=', ',' or '-', not . or .. (it names "
                   "the problem's run folder and results file)");
  }
  for (const auto& other : form.problems) {
    if (other.name == p.name) problem.reject("problem_name", "duplicate problem_name '" + p.name + "'");
  }
  RunSpec run{p.name, {"train.epochs=1000000"}};
  auto& out = run.overrides;
  read_optimizer(problem, out);
  out.push_back("train.eval_every_steps=" + std::to_string(read_frequency(problem)));
  out.insert(out.end(),
             {"train.eval_every_epochs=0", "train.checkpoint_every_epochs=0", "train.eval_at_start=true"});
  out.push_back("data.batch_size=" + std::to_string(problem.count("train_batch_size")));
  out.push_back("data.eval_batch_size=" + std::to_string(problem.count("val_batch_size")));
  const bool verbose = !problem.has("verbose_evals") || problem.boolean("verbose_evals");
  out.push_back("train.log_evals=" + flag(verbose));
  p.metrics = read_metrics(problem);
  problem.finish();
  form.problems.push_back(std::move(p));
  return run;
}

}  // namespace

std::vector<RunSpec> read_problem_configs(DinnoSection problems, DinnoForm& form) {
  std::vector<RunSpec> runs;
  for (const auto& entry : problems.node()) {
    const auto key = config::key_text(problems.source(), entry.first, "problem_configs");
    runs.push_back(read_problem(
        problems.section(key, {"problem_name", "train_batch_size", "val_batch_size", "evaluate_frequency",
                               "verbose_evals", "metrics", "metrics_config", "optimizer_config"}),
        form));
  }
  if (runs.empty()) problems.reject_node(problems.node(), "problem_configs", "expected at least one problem");
  return runs;
}

}  // namespace dtrain::experiment
