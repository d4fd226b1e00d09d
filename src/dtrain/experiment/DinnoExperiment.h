// DiNNO's experiment file (its README: experiment: and problem_configs:) as a dtrain
// experiment: every problem becomes one `dtrain train` run of the decentralized strategy, named
// after its problem_name, with the experiment's settings as overrides common to all runs; after the
// runs, each problem's <problem_name>_results.json is built from its run's metrics.jsonl.
//
// Note [DiNNO's experiment file]
// The file is read as the authors wrote it (their README's template and their later
// dist_mnist_PAPER.yaml): unknown keys are errors with file:line, like every dtrain config.
//   experiment: name, data_dir (relative to the file's folder), output_metadir (like out_dir),
//     use_cuda, writeout, data_split_type (random | hetero), loss (NLL), graph {num_nodes, type,
//     p, gen_attempts}, model {num_filters, kernel_size, linear_width}, individual_training
//     {train_solo, optimizer, lr, epochs, train_batch_size, val_batch_size, verbose}; and dtrain's
//     own optional dataset (mnist, the default, or fashion-mnist: the same IDX files). p and
//     gen_attempts shape random graphs only, as in the authors' script.
//   problem_configs: <any key>: problem_name, train_batch_size, val_batch_size, evaluate_frequency
//     (or metrics_config.evaluate_frequency, the later form), verbose_evals, metrics,
//     optimizer_config {alg_name, outer_iterations, profile (false only), and per algorithm:
//       cadmm | dinno: rho_init, rho_scaling, primal_iterations, primal_optimizer, and primal_lr
//         or primal_lr_start + lr_decay_type (+ primal_lr_finish unless constant): dtrain's
//         optim.name, optim.lr and optim.scheduler (constant, linear or log to final_lr);
//         persistant_primal_opt optional (false);
//       dsgd: alpha0 + mu (alpha_k = alpha_{k-1} (1 - mu alpha_{k-1})), or lr (constant);
//       dsgt: alpha, init_grads optional (false);
//       choco: lr, gamma, compressor (topk | randomk | sign | qbit | identity), ratio (topk and
//         randomk: required; others: refused), bits (qbit: required; others: refused)}.
// A round of the authors' algorithms is one step of dtrain's (train.max_steps = outer_iterations),
// and every run has the same train.seed, so the same initial weights and data split.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/experiment/Experiment.h"
#include "dtrain/experiment/ReportRuns.h"

namespace dtrain::experiment {

// The metrics a problem may list, in the authors' order.
const std::vector<std::string>& dinno_metric_names();

// Fills `spec` (its source_path set) from the root of a file in DiNNO's form: name, out_dir,
// the common overrides, the runs (solo first when asked for) and spec.dinno_form. Throws
// config::ConfigError naming file:line and the key.
void read_dinno_experiment(ExperimentSpec& spec, const YAML::Node& root);

// <problem_name>_results.json from the evaluation records of the problem's run (those that have
// val/node0/loss): problem_name, rounds (each record's step), bytes (strategy/node_bytes_sent),
// and each metric the problem lists, per evaluation. `nodes` is the graph's num_nodes.
nlohmann::json problem_results(const DinnoProblem& problem, const std::vector<MetricRecord>& records,
                               int nodes);

// solo_results.json: {"<node>": {validation_loss, validation_accuracy}} from the solo run's last
// evaluation record. Throws std::runtime_error when the run recorded no evaluation.
nlohmann::json solo_results(const std::vector<MetricRecord>& records, int nodes);

// "Node i - Validation Acc = 0.9812" lines, as the authors' script prints them.
std::string solo_lines(const nlohmann::json& solo);

// Every problem's results (and the solo run's) from the runs in `dir`, as {"<problem>": ..., "solo":
// ...}; written to <dir>/<problem_name>_results.json and solo_results.json when writeout is true.
nlohmann::json write_dinno_results(const DinnoForm& form, const std::filesystem::path& dir);

// The line `dtrain experiment` prints for use_cuda: true ("" for false): dtrain's trainer trains
// on the CPU, whether or not CUDA is usable (the authors' script falls back to the CPU the same way).
std::string cuda_note(bool use_cuda, bool cuda_available);

}  // namespace dtrain::experiment
