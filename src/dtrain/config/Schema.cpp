// The description of every RunConfig key. Lists of names that another layer owns come from
// config/Registry.h; the few closed sets that only config/ interprets are here.
#include "dtrain/config/Schema.h"

#include <algorithm>
#include <limits>
#include <string>

#include "dtrain/config/Registry.h"

namespace dtrain::config {
namespace {

const ChoiceSet kActivations{"relu", "tanh", "gelu", "sigmoid"};
const ChoiceSet kStems{"cifar", "imagenet"};
const ChoiceSet kTasks{"classifier", "lm"};
const ChoiceSet kBackends{"auto", "gloo", "mpi", "nccl"};
const ChoiceSet kDebugModes{"off", "detail"};
const ChoiceSet kEqualize{"pad", "drop", "join"};
const ChoiceSet kDevices{"cpu", "cuda"};
const ChoiceSet kPrecisions{"fp32", "bf16", "fp16"};
const ChoiceSet kLineSearches{"none", "strong_wolfe"};
const ChoiceSet kRunFolders{"dated", "named"};

// A registered set; an empty one means the layer that owns it is not linked into this program.
const ChoiceSet& registered(const char* key) {
  const ChoiceSet& set = registered_choices(key);
  if (set.empty()) {
    throw std::logic_error(
        std::string("no names are registered for ") + key +
        "; link the layer that registers them (dtrain_models, dtrain_optim, dtrain_data or "
        "dtrain_parallel)");
  }
  return set;
}

void describe_data(OptionVisitor& v, DataConfig& d) {
  v.choice("dataset", d.dataset, registered(kDatasetKey));
  v.text("root", d.root, Text::Any);
  v.choice("partition", d.partition, registered(kPartitionKey));
  v.integer("classes_per_rank", d.classes_per_rank, at_least(0));
  v.number("dirichlet_alpha", d.dirichlet_alpha, kPositive);
  v.integer("num_folds", d.num_folds, at_least(2));
  v.integer("fold", d.fold, IntRange{0, std::max<std::int64_t>(0, std::int64_t{d.num_folds} - 1)});
  v.integer("subset_size", d.subset_size, at_least(0));
  v.integer("test_subset_size", d.test_subset_size, at_least(0));
  v.integer("batch_size", d.batch_size, at_least(1));
  v.integer("eval_batch_size", d.eval_batch_size, at_least(1));
  v.boolean("drop_last", d.drop_last);
  v.choice("equalize", d.equalize, kEqualize);
  v.boolean("normalize", d.normalize);
  v.integer("random_crop_padding", d.random_crop_padding, at_least(0));
  v.boolean("horizontal_flip", d.horizontal_flip);
  v.integer("image_size", d.image_size, at_least(1));
  v.int_list("synthetic_shape", d.synthetic_shape, 1, /*allow_empty=*/false);
  v.integer("synthetic_classes", d.synthetic_classes, at_least(1));
  v.integer("synthetic_size", d.synthetic_size, at_least(1));
  v.text("text_path", d.text_path, Text::Any);
  v.integer("seq_len", d.seq_len, at_least(1));
  v.integer("loader_threads", d.loader_threads, at_least(0));
  v.integer("prefetch", d.prefetch, at_least(0));
}

void describe_model(OptionVisitor& v, ModelConfig& m) {
  v.choice("name", m.name, registered(kModelKey));
  v.int_list("hidden", m.hidden, 1, /*allow_empty=*/true);
  v.choice("activation", m.activation, kActivations);
  v.choice("stem", m.stem, kStems);
  v.integer("patch", m.patch, at_least(1));
  v.integer("dim", m.dim, at_least(1));
  v.integer("depth", m.depth, at_least(1));
  v.integer("heads", m.heads, at_least(1));
  v.number("mlp_ratio", m.mlp_ratio, kPositive);
  v.number("dropout", m.dropout, kUnitOpen);
  v.choice("task", m.task, kTasks);
  v.integer("num_filters", m.num_filters, at_least(1));
  v.integer("kernel_size", m.kernel_size, at_least(1));
  v.integer("linear_width", m.linear_width, at_least(1));
  v.text("init_from", m.init_from, Text::Any);
  v.boolean("init_strict", m.init_strict);
  v.text_list("freeze", m.freeze);
}

void describe_scheduler(OptionVisitor& v, SchedulerConfig& s) {
  v.choice("name", s.name, registered(kScheduleKey));
  v.integer("step_size", s.step_size, at_least(1));
  v.number("gamma", s.gamma, kPositive);
  v.integer("warmup_steps", s.warmup_steps, at_least(0));
  v.number("final_lr", s.final_lr, kNonNegative);
  v.number("mu", s.mu, kNonNegative);
}

void describe_optim(OptionVisitor& v, OptimConfig& o) {
  v.choice("name", o.name, registered(kOptimizerKey));
  v.number("lr", o.lr, kPositive);
  v.number("momentum", o.momentum, kNonNegative);
  v.boolean("nesterov", o.nesterov);
  v.number("weight_decay", o.weight_decay, kNonNegative);
  v.number("beta1", o.beta1, kUnitOpen);
  v.number("beta2", o.beta2, kUnitOpen);
  v.number("eps", o.eps, kPositive);
  v.integer("lbfgs_history", o.lbfgs_history, at_least(1));
  v.integer("lbfgs_max_iter", o.lbfgs_max_iter, at_least(1));
  v.choice("lbfgs_line_search", o.lbfgs_line_search, kLineSearches);
  v.choice("loss", o.loss, registered(kLossKey));
  v.section("scheduler", [&] { describe_scheduler(v, o.scheduler); });
}

void describe_parallel(OptionVisitor& v, ParallelConfig& p) {
  v.choice("strategy", p.strategy, registered(kStrategyKey));
  v.choice("backend", p.backend, kBackends);
  v.integer("accumulation_steps", p.accumulation_steps, at_least(1));
  v.number("timeout_s", p.timeout_s, kPositive);
  v.integer("poll_wait_us", p.poll_wait_us, at_least(0));
  v.integer("gloo_threads", p.gloo_threads, at_least(1));
  v.choice("debug", p.debug, kDebugModes);
  // Each strategy's own section; only those the chosen strategy reads apply (read after `strategy`).
  const Choice* chosen = registered(kStrategyKey).find(p.strategy);
  for (const auto& name : p.options.names()) {
    const bool used =
        chosen && std::find(chosen->sections.begin(), chosen->sections.end(), name) != chosen->sections.end();
    const std::string unused = "options of strategy " + name + ", but parallel.strategy is " + p.strategy +
                               "; remove the section (on the command line: parallel." + name +
                               "=null) or set parallel.strategy: " + name;
    v.section(
        name.c_str(), [&] { p.options.at(name).describe(v); }, used ? nullptr : unused.c_str());
  }
}

void describe_train(OptionVisitor& v, TrainConfig& t) {
  v.integer("epochs", t.epochs, at_least(1));
  v.integer("max_steps", t.max_steps, at_least(0));
  v.integer("eval_every_steps", t.eval_every_steps, at_least(0));
  v.integer("eval_every_epochs", t.eval_every_epochs, at_least(0));
  v.boolean("eval_at_start", t.eval_at_start);
  v.boolean("log_evals", t.log_evals);
  v.integer("log_every_steps", t.log_every_steps, at_least(1));
  v.number("target_accuracy", t.target_accuracy, kUnitClosed);
  v.integer("checkpoint_every_steps", t.checkpoint_every_steps, at_least(0));
  v.integer("checkpoint_every_epochs", t.checkpoint_every_epochs, at_least(0));
  v.integer("seed", t.seed, IntRange{0, std::numeric_limits<std::int64_t>::max()});
  v.integer("threads", t.threads, at_least(0));
  v.choice("device", t.device, kDevices);
  v.choice("precision", t.precision, kPrecisions);
}

}  // namespace

void describe_run(OptionVisitor& v, RunConfig& c) {
  v.text("name", c.name, Text::Name);
  v.text("out_dir", c.out_dir, Text::NonEmpty);
  v.choice("run_folder", c.run_folder, kRunFolders);
  v.integer("nproc", c.nproc, at_least(1));
  v.section("data", [&] { describe_data(v, c.data); });
  v.section("model", [&] { describe_model(v, c.model); });
  v.section("optim", [&] { describe_optim(v, c.optim); });
  v.section("parallel", [&] { describe_parallel(v, c.parallel); });
  v.section("train", [&] { describe_train(v, c.train); });
}

}  // namespace dtrain::config
