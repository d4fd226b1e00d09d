// The experiment: section of DiNNO's file: the settings every problem shares (data, graph,
// model, loss, seed) as overrides, the experiment's folder, and the optional solo run of
// individual_training. See Note [DiNNO's experiment file].
#include <filesystem>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/YamlFile.h"
#include "dtrain/experiment/DinnoExperiment.h"
#include "dtrain/experiment/DinnoSection.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;

// The seed has no seed: every run starts from this one (train.seed), so that all problems share
// their initial weights and data split, as the authors' script shares its base model and subsets.
constexpr const char* kDinnoTrainSeed = "0";

// data_dir, taken from the file's folder as the authors' script takes it from experiments/.
std::string data_root(const fs::path& file, const std::string& data_dir) {
  fs::path root = fs::absolute(file.parent_path() / data_dir).lexically_normal();
  if (root.filename().empty()) root = root.parent_path();
  return root.string();
}

void read_graph(DinnoSection graph, DinnoForm& form, std::vector<std::string>& out) {
  form.nodes = static_cast<int>(graph.count("num_nodes"));
  const auto type = graph.choice("type", {"wheel", "cycle", "complete", "random", "star", "torus", "edges"});
  out.push_back("parallel.graph.type=" + type);
  out.push_back("parallel.graph.nodes=" + std::to_string(form.nodes));
  // p and gen_attempts shape random graphs only; the authors' files carry them for every type
  // (the template's wheel has p: 0.6), and their script reads them for random only, as here.
  const auto p = type == "random" || graph.has("p") ? graph.fraction("p") : "";
  const auto attempts = graph.has("gen_attempts") ? std::to_string(graph.count("gen_attempts")) : "";
  if (type == "random") {
    out.push_back("parallel.graph.p=" + p);
    if (!attempts.empty()) out.push_back("parallel.graph.gen_attempts=" + attempts);
  }
  graph.finish();
}

void read_model(DinnoSection model, std::vector<std::string>& out) {
  out.push_back("model.name=dinnocnn");
  for (const char* key : {"num_filters", "kernel_size", "linear_width"})
    out.push_back(std::string("model.") + key + "=" + std::to_string(model.count(key)));
  model.finish();
}

// individual_training: with train_solo true, a run named "solo" in which every node trains alone
// on its part of the data (no communication); its keys are checked even when train_solo is false.
void read_solo(DinnoSection solo, DinnoForm& form, std::vector<RunSpec>& runs) {
  form.solo = solo.boolean("train_solo");
  RunSpec run{"solo", {"parallel.decentralized.algorithm=individual"}};
  const auto take = [&](const char* key, auto read) {
    if (form.solo || solo.has(key)) read(key);
  };
  take("optimizer", [&](const char* k) {
    run.overrides.push_back("optim.name=" + solo.choice(k, {"adam", "adamw", "sgd"}));
  });
  take("lr", [&](const char* k) { run.overrides.push_back("optim.lr=" + solo.number(k)); });
  take("epochs",
       [&](const char* k) { run.overrides.push_back("train.epochs=" + std::to_string(solo.count(k))); });
  take("train_batch_size",
       [&](const char* k) { run.overrides.push_back("data.batch_size=" + std::to_string(solo.count(k))); });
  take("val_batch_size", [&](const char* k) {
    run.overrides.push_back("data.eval_batch_size=" + std::to_string(solo.count(k)));
  });
  if (solo.has("verbose")) form.solo_verbose = solo.boolean("verbose");
  solo.finish();
  if (form.solo) runs.push_back(std::move(run));
}

void read_data(DinnoSection& exp, const fs::path& file, std::vector<std::string>& out) {
  // dataset is dtrain's addition (the authors' script is MNIST only): the same IDX format, so
  // DiNNO's set-up runs on Fashion-MNIST, which Debian packages, unchanged otherwise.
  out.push_back("data.dataset=" + (exp.has("dataset") ? exp.choice("dataset", {"mnist", "fashion-mnist"})
                                                      : std::string("mnist")));
  out.push_back("data.root=" + data_root(file, exp.text("data_dir")));
  const auto split = exp.choice("data_split_type", {"random", "hetero"});
  out.push_back("data.partition=" + split);
  // 0 = the classes divided over the nodes, as the authors split them (an error for nodes > classes).
  if (split == "hetero") out.push_back("data.classes_per_rank=0");
  const auto loss = exp.text("loss");
  if (loss != "NLL")
    exp.reject("loss", "expected NLL (the only loss of DiNNO's MNIST problem), found \"" + loss + "\"");
  out.push_back("optim.loss=nll");
}

// The experiment: section into spec (name, out_dir, common overrides, the solo run, dinno_form).
void read_experiment_section(ExperimentSpec& spec, DinnoSection exp, DinnoForm& form) {
  spec.name = exp.text("name");
  if (!is_folder_name(spec.name)) {
    exp.reject("name",
               "expected a name of letters, digits, '.', '_', '=', ',' or '-', not . or .. (it names the "
               "experiment's folder inside output_metadir)");
  }
  spec.out_dir = exp.text("output_metadir");
  if (exp.has("use_cuda")) form.use_cuda = exp.boolean("use_cuda");
  if (exp.has("writeout")) form.writeout = exp.boolean("writeout");
  auto& out = spec.overrides;
  read_data(exp, spec.source_path, out);
  read_model(exp.section("model", {"num_filters", "kernel_size", "linear_width"}), out);
  out.push_back("parallel.strategy=decentralized");
  read_graph(exp.section("graph", {"num_nodes", "type", "p", "gen_attempts"}), form, out);
  out.push_back(std::string("train.seed=") + kDinnoTrainSeed);
  if (exp.has("individual_training")) {
    read_solo(exp.section("individual_training", {"train_solo", "optimizer", "lr", "epochs",
                                                  "train_batch_size", "val_batch_size", "verbose"}),
              form, spec.runs);
  }
  exp.finish();
}

}  // namespace

void read_dinno_experiment(ExperimentSpec& spec, const YAML::Node& root) {
  const std::string source = spec.source_path.string();
  DinnoSection top(source, root, "", {"experiment", "problem_configs"});
  DinnoForm form;
  read_experiment_section(
      spec,
      top.section("experiment", {"name", "data_dir", "output_metadir", "use_cuda", "writeout", "dataset",
                                 "data_split_type", "loss", "graph", "model", "individual_training"}),
      form);
  auto problems = read_problem_configs(top.section("problem_configs", {}), form);
  for (const auto& problem : form.problems) {
    if (form.solo && problem.name == "solo")
      top.reject("problem_configs", "problem_name solo is the individual_training run's; rename the problem");
  }
  spec.runs.insert(spec.runs.end(), problems.begin(), problems.end());
  top.finish();
  spec.dinno_form = std::move(form);
}

}  // namespace dtrain::experiment
