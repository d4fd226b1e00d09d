// The description of every RunConfig key. Lists of names that another layer owns come from
// config/Registry.h; the closed sets are the enums' names tables in RunConfig.h.
#include "dtrain/config/Schema.h"

#include <algorithm>
#include <limits>
#include <string>

#include "dtrain/config/Registry.h"

namespace dtrain::config {
namespace {

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
  v.choice("dataset", d.dataset, registered(kDatasetKey), "The data set (Data sets below)");
  v.text("root", d.root, Text::Any, "Where its files are; \"\" = the data set's default folder");
  v.choice("partition", d.partition, registered(kPartitionKey),
           "How the training set is split over workers (Partitions below)");
  v.integer("classes_per_rank", d.classes_per_rank, at_least(0),
            "hetero: classes each worker (graph node) holds; 0 = the classes split evenly");
  v.number("dirichlet_alpha", d.dirichlet_alpha, kPositive,
           "dirichlet: concentration; smaller = more skewed class mixes");
  v.integer("num_folds", d.num_folds, at_least(2), "kfold: K, the number of folds");
  v.integer("fold", d.fold, IntRange{0, std::max<std::int64_t>(0, std::int64_t{d.num_folds} - 1)},
            "kfold: the held-out fold, in [0, num_folds)");
  v.integer("subset_size", d.subset_size, at_least(0),
            "Use the first N training samples, before partitioning (0 = all)");
  v.integer("test_subset_size", d.test_subset_size, at_least(0),
            "Evaluate on the first N test samples (0 = all)");
  v.integer("batch_size", d.batch_size, at_least(1), "Training samples per batch, per worker");
  v.integer("eval_batch_size", d.eval_batch_size, at_least(1), "Evaluation samples per batch, per worker");
  v.boolean("drop_last", d.drop_last, "Drop each epoch's last, incomplete batch");
  v.choice("equalize", d.equalize, kEqualizeNames,
           "Shares of unequal size: pad (repeat samples, as DistributedSampler), drop, or join");
  v.boolean("normalize", d.normalize, "Normalise each channel by the data set's mean and std");
  v.integer("random_crop_padding", d.random_crop_padding, at_least(0),
            "Pad by this many pixels and crop randomly back (0 = no random crop)");
  v.boolean("horizontal_flip", d.horizontal_flip, "Flip training images horizontally at random");
  v.integer("image_size", d.image_size, at_least(1), "image-folder: images are resized to this square");
  v.int_list("synthetic_shape", d.synthetic_shape, 1, /*allow_empty=*/false,
             "synthetic: the shape of one sample, e.g. [3, 32, 32]");
  v.integer("synthetic_classes", d.synthetic_classes, at_least(1), "synthetic: number of classes");
  v.integer("synthetic_size", d.synthetic_size, at_least(1), "synthetic: number of training samples");
  v.integer(
      "synthetic_vocab", d.synthetic_vocab, at_least(0),
      "synthetic: > 0: token sequences of synthetic_shape [T] with ids below this (0 = padding) instead "
      "of images");
  v.text("text_path", d.text_path, Text::Any, "text: the text file of the character-level language model");
  v.integer(
      "seq_len", d.seq_len, at_least(1),
      "text: characters per training sequence; sentences: tokens per sentence, [CLS] and [SEP] included");
  v.text("tokenizer", d.tokenizer, Text::Any,
         "sentences: the SentencePiece model (ALBERT's spiece.model, or `dtrain tokenizer train`'s)");
  v.choice("sentence_format", d.sentence_format, kSentenceFormatNames,
           "sentences: auto (from the train file), cola, sst2 (header sentence<TAB>label), tsv "
           "(text<TAB>label) or "
           "jsonl ({\"text\": .., \"label\": ..})");
  v.text_list("labels", d.labels, "sentences: the labels rows carry, class 0 first (empty = 0 and 1)");
  v.integer("loader_threads", d.loader_threads, at_least(-1),
            "Threads preparing batches per worker (0 = on the training thread; -1 = auto: 2 on a GPU, 0 on "
            "the CPU)");
  v.integer("prefetch", d.prefetch, at_least(0), "Batches prepared ahead per loader");
}

void describe_albert(OptionVisitor& v, AlbertConfig& a) {
  v.integer("embedding_size", a.embedding_size, at_least(0),
            "E, the factorized embedding's width (0 = model.size's)");
  v.integer("hidden_size", a.hidden_size, at_least(0), "H, the hidden width (0 = model.size's)");
  v.integer("num_layers", a.num_layers, at_least(0),
            "Applications of the one shared layer (0 = model.size's)");
  v.integer("num_heads", a.num_heads, at_least(0), "Attention heads, dividing H (0 = model.size's)");
  v.integer("intermediate_size", a.intermediate_size, at_least(0), "The FFN's width (0 = model.size's)");
  v.integer("max_positions", a.max_positions, at_least(0), "Learned positions (0 = model.size's)");
  v.integer("vocab_size", a.vocab_size, at_least(0), "Token ids (0 = the data set's vocabulary)");
  v.number("classifier_dropout", a.classifier_dropout, kUnitOpen, "Dropout before the classifier");
  v.number("layer_norm_eps", a.layer_norm_eps, kPositive, "LayerNorm's epsilon");
}

}  // namespace

const std::vector<std::string>& model_specific_keys() {
  static const std::vector<std::string> keys{"hidden",       "activation", "stem",          "patch",
                                             "dim",          "depth",      "heads",         "mlp_ratio",
                                             "dropout",      "task",       "num_filters",   "kernel_size",
                                             "linear_width", "size",       "tie_embeddings"};
  return keys;
}

std::string model_key_unused(const std::string& model_name, const std::string& key) {
  const ChoiceSet& models = registered_choices(kModelKey);
  const Choice* chosen = models.find(model_name);
  if (!chosen || !chosen->reads) return "";
  const auto& reads = *chosen->reads;
  if (std::find(reads.begin(), reads.end(), key) != reads.end()) return "";
  std::vector<std::string> readers;
  for (const auto& choice : models.choices()) {
    if (choice.reads && std::find(choice.reads->begin(), choice.reads->end(), key) != choice.reads->end())
      readers.push_back(choice.name);
  }
  std::string names;
  for (std::size_t i = 0; i < readers.size(); ++i)
    names += (i == 0 ? "" : i + 1 == readers.size() ? " and " : ", ") + readers[i];
  return "model " + chosen->name + " does not read it (" + names + (readers.size() == 1 ? " does" : " do") +
         "); remove model." + key + " or set model.name to a model that reads it";
}

namespace {

void describe_model(OptionVisitor& v, ModelConfig& m) {
  v.choice("name", m.name, registered(kModelKey), "The model (Models below)");
  v.int_list("hidden", m.hidden, 1, /*allow_empty=*/true, "mlp: widths of the hidden layers");
  v.choice("activation", m.activation, kActivationNames, "mlp: the activation between layers");
  v.choice("stem", m.stem, kStemNames, "resnet: cifar (3x3 convolution) or imagenet (7x7 and max pool)");
  v.integer("patch", m.patch, at_least(1), "vit: patch size in pixels");
  v.integer("dim", m.dim, at_least(1), "vit, transformer: embedding width");
  v.integer("depth", m.depth, at_least(1), "vit, transformer: number of blocks");
  v.integer("heads", m.heads, at_least(1), "vit, transformer: attention heads");
  v.number("mlp_ratio", m.mlp_ratio, kPositive, "vit, transformer: MLP width as a multiple of dim");
  v.number("dropout", m.dropout, kUnitOpen,
           "Dropout probability (mlp, lenet5, resnet, vit, transformer, gpt, albert)");
  v.choice("task", m.task, kTaskNames, "transformer: classifier, or lm (next-character prediction)");
  v.integer("num_filters", m.num_filters, at_least(1), "dinnocnn: filters of its convolution");
  v.integer("kernel_size", m.kernel_size, at_least(1), "dinnocnn: kernel size of its convolution");
  v.integer("linear_width", m.linear_width, at_least(1), "dinnocnn: width of its hidden linear layer");
  v.choice("size", m.size, kModelSizeNames, "albert: tiny, base (H 768, 12 layers) or large (H 1024, 24)");
  // Read after name: only a model that declares the section takes it.
  const Choice* chosen = registered(kModelKey).find(m.name);
  const bool albert = chosen && std::find(chosen->sections.begin(), chosen->sections.end(), "albert") !=
                                    chosen->sections.end();
  const std::string unused =
      "sizes of model albert, but model.name is " + m.name + "; remove the section or set model.name: albert";
  v.section(
      "albert", [&] { describe_albert(v, m.albert); }, albert ? nullptr : unused.c_str());
  v.text(
      "init_from", m.init_from, Text::Any,
      "Start from the weights of this checkpoint, run folder, model.pt, or a Hugging Face model.safetensors "
      "or pytorch_model.bin (or their folder) (\"\" = from train.seed)");
  v.boolean("init_strict", m.init_strict,
            "init_from: every parameter must be found with its shape (false: load what matches)");
  v.text_list("freeze", m.freeze, "Glob patterns of parameter names not trained, e.g. [\"layers.0.*\"]");
  v.boolean("deferred_init", m.deferred_init,
            "vit, transformer: each rank builds only the stages and shards it keeps (the same weights)");
  v.boolean("tie_embeddings", m.tie_embeddings,
            "gpt: the output layer computes with the token embedding's weight (false: its own weight)");
  // A key the chosen model does not read is refused, not ignored; said after every key is visited,
  // so that writers take out what they wrote.
  for (const auto& key : model_specific_keys()) {
    const auto why = model_key_unused(m.name, key);
    if (!why.empty()) v.inapplicable(key.c_str(), why.c_str());
  }
}

void describe_scheduler(OptionVisitor& v, SchedulerConfig& s) {
  v.choice("name", s.name, registered(kScheduleKey), "The learning-rate schedule (Schedules below)");
  v.integer("step_size", s.step_size, at_least(1), "step: epochs between decays");
  v.number("gamma", s.gamma, kPositive, "step: the factor of each decay");
  v.integer("warmup_steps", s.warmup_steps, at_least(0),
            "Linear warm-up from 0 to optim.lr, before any schedule");
  v.number("final_lr", s.final_lr, kNonNegative, "cosine, linear, log: the rate at the end of training");
  v.number("mu", s.mu, kNonNegative, "inverse: lr_k = lr_{k-1} (1 - mu lr_{k-1}), DiNNO's DSGD decay");
}

void describe_optim(OptionVisitor& v, OptimConfig& o) {
  v.choice("name", o.name, registered(kOptimizerKey), "The optimizer (Optimizers below)");
  v.number("lr", o.lr, kPositive, "Learning rate");
  v.number("momentum", o.momentum, kNonNegative, "sgd: momentum");
  v.boolean("nesterov", o.nesterov, "sgd: Nesterov momentum");
  v.number("weight_decay", o.weight_decay, kNonNegative, "L2 penalty (adamw: decoupled weight decay)");
  v.number("beta1", o.beta1, kUnitOpen, "adam, adamw: decay of the first moment");
  v.number("beta2", o.beta2, kUnitOpen, "adam, adamw: decay of the second moment");
  v.number("eps", o.eps, kPositive, "adam, adamw: added to the denominator");
  v.integer("lbfgs_history", o.lbfgs_history, at_least(1), "lbfgs: update pairs kept");
  v.integer("lbfgs_max_iter", o.lbfgs_max_iter, at_least(1), "lbfgs: iterations per step");
  v.choice("lbfgs_line_search", o.lbfgs_line_search, kLineSearchNames, "lbfgs: line search");
  v.choice("foreach", o.foreach, kAutoBoolNames,
           "sgd, adam, adamw: multi-tensor updates (auto: on for parameters on a GPU, as PyTorch's foreach)");
  v.choice("loss", o.loss, registered(kLossKey), "The loss (Losses below)");
  v.section("scheduler", [&] { describe_scheduler(v, o.scheduler); });
}

void describe_train(OptionVisitor& v, TrainConfig& t) {
  v.integer("epochs", t.epochs, at_least(1), "Passes over the training set");
  v.integer("max_steps", t.max_steps, at_least(0),
            "Stop after this many optimizer steps (0 = run all epochs)");
  v.integer("eval_every_steps", t.eval_every_steps, at_least(0),
            "Evaluate every N steps (0 = at epoch ends only)");
  v.integer("eval_every_epochs", t.eval_every_epochs, at_least(0),
            "Evaluate every N epochs (0 = not at epoch ends)");
  v.boolean("eval_at_start", t.eval_at_start, "Also evaluate before the first step");
  v.boolean("log_evals", t.log_evals, "Print evaluation lines on the console (false: the run's log only)");
  v.integer("log_every_steps", t.log_every_steps, at_least(1), "Log the training loss every N steps");
  v.number("target_accuracy", t.target_accuracy, kUnitClosed,
           "Stop when test top-1 accuracy reaches this (0 = never)");
  v.integer("checkpoint_every_steps", t.checkpoint_every_steps, at_least(0),
            "Checkpoint every N steps (0 = not by steps)");
  v.integer("checkpoint_every_epochs", t.checkpoint_every_epochs, at_least(0),
            "Checkpoint every N epochs (0 = only at the end)");
  v.integer("keep_checkpoints", t.keep_checkpoints, at_least(0),
            "Keep the newest N checkpoints, deleting older ones (0 = keep every one)");
  v.integer("seed", t.seed, IntRange{0, std::numeric_limits<std::int64_t>::max()},
            "Random seed of weights, data order and augmentation");
  v.integer("threads", t.threads, at_least(0), "Intra-op threads per worker (0 = cores / local workers)");
  v.choice("device", t.device, kDeviceNames, "cpu or cuda");
  v.choice("precision", t.precision, kPrecisionNames,
           "fp32, bf16 (autocast), or fp16 (dynamic loss scaling); master weights stay fp32");
  v.boolean(
      "sync_every_step", t.sync_every_step,
      "Wait for the device at every step's end (per-step times; slower on a GPU); false: at log points");
  v.choice("cudnn_benchmark", t.cudnn_benchmark, kAutoBoolNames,
           "cuda: cuDNN's autotuner picks each convolution's fastest algorithm (auto: on)");
  v.choice("float32_matmul_precision", t.float32_matmul_precision, kMatmulPrecisionNames,
           "cuda: highest (no TF32, PyTorch's default), high or medium (TF32 matrix products)");
  v.choice("channels_last", t.channels_last, kAutoBoolNames,
           "Convolutional models' weights and image batches in channels-last order (auto: on a GPU)");
  v.boolean("cuda_graph", t.cuda_graph,
            "cuda: capture the step in a CUDA graph and replay it (local strategy; sgd, adam or adamw)");
  v.choice("activation_checkpointing", t.activation_checkpointing, kActivationCheckpointingNames,
           "Recompute blocks' activations in backward: none, full (every block) or selective (every k-th)");
  v.integer("activation_checkpointing_every", t.activation_checkpointing_every, at_least(0),
            "selective: recompute every k-th block (0 = every 2nd)");
}

void describe_mesh(OptionVisitor& v, MeshConfig& m) {
  v.integer("pp", m.pp, at_least(0), "Pipeline stages (0 = not set: parallel.pipeline.stages, or 1)");
  v.integer("dp_replicate", m.dp_replicate, at_least(0),
            "Replicas that all-reduce their gradients (0 = not set: 1 in a mesh that sets another degree)");
  v.integer("dp_shard", m.dp_shard, at_least(0),
            "Ranks each replica's model state is sharded over, consecutive ranks (zero; 0 = not set)");
  v.integer("tp", m.tp, at_least(0),
            "Ranks each layer of parallel.tensor.plan is split over, consecutive ranks (0 = not set: 1)");
}

void describe_tensor(OptionVisitor& v, TensorConfig& t) {
  v.text_list("plan", t.plan,
              "Tensor parallel plan, \"<module pattern>=<style>\" (colwise, colwise:K, rowwise, embedding, "
              "sequence, output); empty: the model's own");
  v.boolean("sequence_parallel", t.sequence_parallel,
            "Run LayerNorm and dropout on a shard of the sequence: all-gathers and reduce-scatters instead "
            "of all-reduces");
}

}  // namespace

void describe_parallel(OptionVisitor& v, ParallelConfig& p) {
  v.choice("strategy", p.strategy, registered(kStrategyKey),
           "How workers share the training (Strategies below; each one's options are parallel.<strategy>.*)");
  v.choice("backend", p.backend, kBackendNames, "Communication backend; auto picks from the job's layout");
  v.integer("accumulation_steps", p.accumulation_steps, at_least(1),
            "Micro-batches per optimizer step; communicate on the last only");
  v.number("timeout_s", p.timeout_s, kPositive, "Seconds the rendezvous and every collective may take");
  v.integer("poll_wait_us", p.poll_wait_us, at_least(0),
            "Microseconds a collective is polled for before the wait blocks");
  v.integer("gloo_threads", p.gloo_threads, at_least(1), "gloo: worker threads of the process group");
  v.choice("debug", p.debug, kDebugModeNames,
           "detail: compare every collective between ranks before it runs (TORCH_DISTRIBUTED_DEBUG=DETAIL)");
  // Every strategy reads it: a degree it cannot honour is refused where the world size is known
  // (parallel::resolve_mesh), not ignored.
  v.section("mesh", [&] { describe_mesh(v, p.mesh); });
  // Read by every strategy on a mesh with tp > 1, refused where tp is 1 (parallel::resolve_mesh).
  v.section("tensor", [&] { describe_tensor(v, p.tensor); });
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

void describe_run(OptionVisitor& v, RunConfig& c) {
  v.text("name", c.name, Text::Name, "The run's name, which its folder is named after");
  v.text("out_dir", c.out_dir, Text::NonEmpty, "Where run folders are made");
  v.choice("run_folder", c.run_folder, kRunFolderNames,
           "dated: <out_dir>/<date-time>_<name>/, new every run; named: <out_dir>/<name>/, once");
  v.integer("nproc", c.nproc, at_least(1), "Local workers dtrain train starts (--nproc overrides it)");
  v.section("data", [&] { describe_data(v, c.data); });
  v.section("model", [&] { describe_model(v, c.model); });
  v.section("optim", [&] { describe_optim(v, c.optim); });
  v.section("parallel", [&] { describe_parallel(v, c.parallel); });
  v.section("train", [&] { describe_train(v, c.train); });
}

}  // namespace dtrain::config
