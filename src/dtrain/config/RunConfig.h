// The typed configuration of one training run. config/ fills it from YAML (with line numbers in
// every error) and dotted command-line overrides; every layer above reads its own part. Defaults
// here are the defaults a user gets when a key is left out. Names marked "registered" are the
// ones their layer registers (config/Registry.h): `dtrain train --help` lists them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/config/Options.h"
#include "dtrain/util/EnumNames.h"

namespace dtrain::config {

// The closed sets of names a key may hold, as enums, each with its one table of YAML spellings
// (the order is the order `dtrain train --help` and the reader's errors list them in). The reader
// turns the text into the enum; code above config/ compares enums, never the text.

enum class Equalize { Pad, Drop, Join };  // data.equalize
inline constexpr util::EnumNames<Equalize, 3> kEqualizeNames{
    {{{Equalize::Pad, "pad"}, {Equalize::Drop, "drop"}, {Equalize::Join, "join"}}}};

// data.sentence_format: how the sentences data set reads its rows (data/SentenceFile.h).
enum class SentenceFormat { Auto, Cola, Sst2, Tsv, Jsonl };
inline constexpr util::EnumNames<SentenceFormat, 5> kSentenceFormatNames{
    {{{SentenceFormat::Auto, "auto"},
      {SentenceFormat::Cola, "cola"},
      {SentenceFormat::Sst2, "sst2"},
      {SentenceFormat::Tsv, "tsv"},
      {SentenceFormat::Jsonl, "jsonl"}}}};

enum class Activation { Relu, Tanh, Gelu, Sigmoid };  // model.activation
inline constexpr util::EnumNames<Activation, 4> kActivationNames{{{{Activation::Relu, "relu"},
                                                                   {Activation::Tanh, "tanh"},
                                                                   {Activation::Gelu, "gelu"},
                                                                   {Activation::Sigmoid, "sigmoid"}}}};

enum class Stem { Cifar, Imagenet };  // model.stem
inline constexpr util::EnumNames<Stem, 2> kStemNames{
    {{{Stem::Cifar, "cifar"}, {Stem::Imagenet, "imagenet"}}}};

enum class Task { Classifier, Lm };  // model.task
inline constexpr util::EnumNames<Task, 2> kTaskNames{{{{Task::Classifier, "classifier"}, {Task::Lm, "lm"}}}};

enum class ModelSize { Tiny, Base, Large };  // model.size (albert)
inline constexpr util::EnumNames<ModelSize, 3> kModelSizeNames{
    {{{ModelSize::Tiny, "tiny"}, {ModelSize::Base, "base"}, {ModelSize::Large, "large"}}}};

enum class LineSearch { None, StrongWolfe };  // optim.lbfgs_line_search
inline constexpr util::EnumNames<LineSearch, 2> kLineSearchNames{
    {{{LineSearch::None, "none"}, {LineSearch::StrongWolfe, "strong_wolfe"}}}};

// optim.foreach, train.cudnn_benchmark, train.channels_last: on, off, or decided from the device.
enum class AutoBool { Auto, True, False };
inline constexpr util::EnumNames<AutoBool, 3> kAutoBoolNames{
    {{{AutoBool::Auto, "auto"}, {AutoBool::True, "true"}, {AutoBool::False, "false"}}}};

enum class Backend { Auto, Gloo, Mpi, Nccl };  // parallel.backend
inline constexpr util::EnumNames<Backend, 4> kBackendNames{
    {{{Backend::Auto, "auto"}, {Backend::Gloo, "gloo"}, {Backend::Mpi, "mpi"}, {Backend::Nccl, "nccl"}}}};

enum class DebugMode { Off, Detail };  // parallel.debug
inline constexpr util::EnumNames<DebugMode, 2> kDebugModeNames{
    {{{DebugMode::Off, "off"}, {DebugMode::Detail, "detail"}}}};

enum class Device { Cpu, Cuda };  // train.device
inline constexpr util::EnumNames<Device, 2> kDeviceNames{{{{Device::Cpu, "cpu"}, {Device::Cuda, "cuda"}}}};

enum class Precision { Fp32, Bf16, Fp16 };  // train.precision
inline constexpr util::EnumNames<Precision, 3> kPrecisionNames{
    {{{Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}, {Precision::Fp16, "fp16"}}}};

enum class MatmulPrecision { Highest, High, Medium };  // train.float32_matmul_precision
inline constexpr util::EnumNames<MatmulPrecision, 3> kMatmulPrecisionNames{
    {{{MatmulPrecision::Highest, "highest"},
      {MatmulPrecision::High, "high"},
      {MatmulPrecision::Medium, "medium"}}}};

// train.activation_checkpointing: which of a model's blocks recompute their activations in backward.
enum class ActivationCheckpointing { None, Full, Selective };
inline constexpr util::EnumNames<ActivationCheckpointing, 3> kActivationCheckpointingNames{
    {{{ActivationCheckpointing::None, "none"},
      {ActivationCheckpointing::Full, "full"},
      {ActivationCheckpointing::Selective, "selective"}}}};

enum class RunFolder { Dated, Named };  // run_folder
inline constexpr util::EnumNames<RunFolder, 2> kRunFolderNames{
    {{{RunFolder::Dated, "dated"}, {RunFolder::Named, "named"}}}};

struct DataConfig {
  // registered by data/: fashion-mnist, mnist, cifar10, cifar100, image-folder, synthetic, text, sentences
  std::string dataset = "fashion-mnist";
  // "" = the dataset's default root (Debian's /usr/share/datasets/fashion-mnist for fashion-mnist).
  std::string root;
  // Partition of the training set over ranks, registered by data/: random, hetero, dirichlet,
  // kfold, subset.
  std::string partition = "random";
  // hetero: classes per rank (per graph node under parallel.strategy decentralized); 0 = the
  // classes split evenly, classes / holders, an error when there are more holders than classes
  int classes_per_rank = 2;
  double dirichlet_alpha = 0.5;  // dirichlet
  int num_folds = 5;             // kfold: K
  int fold = 0;                  // kfold: k, the held-out fold, in [0, K)
  std::int64_t subset_size =
      0;  // subset: N samples of the training set (0 = all); applies before partitioning
  std::int64_t test_subset_size = 0;  // evaluate on the first N test samples (0 = all)
  int batch_size = 64;                // per worker
  int eval_batch_size = 1000;         // per worker
  bool drop_last = true;
  // Ranks whose shares differ in size: pad (every rank draws the largest share's batches, repeating
  // its own samples; torch's DistributedSampler) | drop (the smallest share's) | join (each its own;
  // ranks that run out shadow the others' steps with zero gradients: parallel: Note [Join])
  Equalize equalize = Equalize::Pad;
  bool normalize = true;        // per-channel mean/std of the data set
  int random_crop_padding = 0;  // 0 = no random crop
  bool horizontal_flip = false;
  int image_size = 64;  // image-folder: images are resized to image_size x image_size
  // synthetic
  std::vector<std::int64_t> synthetic_shape{1, 28, 28};
  int synthetic_classes = 10;
  std::int64_t synthetic_size = 1024;
  // > 0: token sequences of synthetic_shape [T] with ids below this (0 = padding), one class each,
  // instead of images
  int synthetic_vocab = 0;
  // text (character-level language model)
  std::string text_path;
  // text: characters per sequence; sentences: tokens per sentence, [CLS] and [SEP] included
  int seq_len = 64;
  // sentences: train.tsv and dev.tsv (or .jsonl) under data.root, tokenized by this SentencePiece
  // model (ALBERT's spiece.model, or one `dtrain tokenizer train` made)
  std::string tokenizer;
  SentenceFormat sentence_format = SentenceFormat::Auto;
  // sentences: the labels a row may carry, class 0 first; empty = 0 and 1
  std::vector<std::string> labels;
  // loader
  // Threads making batches per worker; 0 = on the training thread; -1 = auto: 2 for a worker that
  // trains on a GPU (its batches are made and pinned while the GPU computes), 0 on the CPU (where
  // they would take cores from the computation). data::loader_threads() resolves it.
  int loader_threads = -1;
  int prefetch = 2;  // batches prepared ahead per loader
};

// model.albert: ALBERT's sizes over those model.size names (Hugging Face's AlbertConfig names them
// alike); 0 = the size's.
struct AlbertConfig {
  int embedding_size = 0;     // E: the factorized embedding's width
  int hidden_size = 0;        // H
  int num_layers = 0;         // applications of the one shared layer
  int num_heads = 0;          // attention heads; must divide H
  int intermediate_size = 0;  // the FFN's width
  int max_positions = 0;      // learned positions; sequences may be no longer
  int vocab_size = 0;         // 0 = the data set's vocabulary
  double classifier_dropout = 0.1;
  double layer_norm_eps = 1e-12;
};

struct ModelConfig {
  // registered by models/: mlp, mnistnet, lenet5, resnet18, resnet50, vit, transformer, albert
  std::string name = "lenet5";
  std::vector<int> hidden{256, 128};         // mlp
  Activation activation = Activation::Relu;  // mlp: relu | tanh | gelu | sigmoid
  Stem stem = Stem::Cifar;                   // resnet: cifar | imagenet
  int patch = 4;                             // vit
  int dim = 64;                              // vit, transformer
  int depth = 2;                             // vit, transformer
  int heads = 4;                             // vit, transformer
  double mlp_ratio = 2.0;                    // vit, transformer
  double dropout = 0.0;
  Task task = Task::Classifier;  // transformer: classifier | lm
  // dinnocnn (DiNNO's CNN): one ReLU convolution, 2x2 max pool, two linear layers
  int num_filters = 3;
  int kernel_size = 5;
  int linear_width = 64;
  // albert (Lan et al. 2020): a named size, its sizes overridden by model.albert.*. The padding
  // token masked out of attention is the data set's (data::Dataset::pad_id).
  ModelSize size = ModelSize::Base;
  AlbertConfig albert;
  // Transfer learning: start from the weights in this dtrain checkpoint, run folder (its model.pt,
  // else its latest checkpoint) or exported model.pt, matched by name and shape; "" = from the seed.
  std::string init_from;
  // true: every parameter and buffer must be found with its shape; false: load what matches and
  // keep the rest (a classifier head for another class count) as initialised.
  bool init_strict = true;
  // Glob patterns ('*', '?') over parameter names ("layers.0.*"): those parameters are not trained.
  std::vector<std::string> freeze;
  // Each rank builds only the stages and shards it keeps, from the weights an eager build gives
  // (Note [Deferred initialisation] in models/Network.h): vit and transformer.
  bool deferred_init = false;
  // gpt: the output layer computes with the token embedding's weight (true, GPT-2's and Hugging
  // Face's tie_word_embeddings) or has its own (false: what tensor parallelism and a sharded
  // pipeline with the embedding and the head on different stages need).
  bool tie_embeddings = true;
};

struct SchedulerConfig {
  // registered by optim/: constant, step, cosine, linear, log
  std::string name = "constant";
  int step_size = 30;     // step: epochs between decays (the DDP tutorial: x0.1 every 30)
  double gamma = 0.1;     // step
  int warmup_steps = 0;   // linear warm-up from 0 to lr, before any schedule
  double final_lr = 0.0;  // cosine, linear, log: the rate at the end of training
  double mu = 0.001;      // inverse: lr_k = lr_{k-1} (1 - mu lr_{k-1}) (DiNNO's DSGD)
};

struct OptimConfig {
  std::string name = "sgd";  // registered by optim/: sgd, adam, adamw, lbfgs
  double lr = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  int lbfgs_history = 10;
  int lbfgs_max_iter = 20;
  LineSearch lbfgs_line_search = LineSearch::None;  // none | strong_wolfe
  // sgd, adam, adamw: one multi-tensor update per operation (true) or one per tensor (false);
  // auto: true for parameters on a GPU (optim/ForeachOptimizers.h)
  AutoBool foreach = AutoBool::Auto;
  std::string loss = "cross_entropy";  // registered by optim/: cross_entropy, nll, mse
  SchedulerConfig scheduler;
};

// parallel.mesh: the degrees of the device mesh's dimensions, outermost first (parallel/Mesh.h,
// Note [The device mesh]); their product is the world size. 0 = not set: a mesh left wholly unset is
// what the strategy does on its own (zero on N ranks: dp_shard N), and within a set mesh an unset
// degree is 1 (pp: parallel.pipeline.stages).
struct MeshConfig {
  int pp = 0;            // pipeline stages
  int dp_replicate = 0;  // replicas whose gradients are all-reduced
  int dp_shard = 0;      // ranks a replica's model state is sharded over (consecutive ranks)
  int tp = 0;            // ranks each layer of the plan is split over (innermost, consecutive ranks)
};

// parallel.tensor: how the model's layers are split over the mesh's tp ranks (parallel/TensorParallel.h).
struct TensorConfig {
  // "<module pattern>=<style>" (e.g. "layers.*.fc1=colwise"); empty: the model's own plan.
  std::vector<std::string> plan;
  // The LayerNorm and dropout regions run on a shard of the sequence (Megatron-LM's sequence
  // parallelism): all-gathers and reduce-scatters in place of the all-reduces.
  bool sequence_parallel = false;
};

struct ParallelConfig {
  // registered by parallel/, one folder each: local, data_parallel
  std::string strategy = "data_parallel";
  Backend backend = Backend::Auto;    // auto | gloo | mpi | nccl (comm: Note [Choosing a backend])
  int accumulation_steps = 1;         // micro-batches per optimizer step; communicate on the last only
  double timeout_s = 300.0;           // rendezvous and every collective
  std::int64_t poll_wait_us = 50000;  // wait for a collective polling this long, then block
  int gloo_threads = 2;               // gloo: worker threads of the process group
  // off | detail: compare every collective's fingerprint between ranks before it runs, and report a
  // mismatch naming both ranks and calls instead of hanging (TORCH_DISTRIBUTED_DEBUG=DETAIL; comm:
  // Note [Collective checks])
  DebugMode debug = DebugMode::Off;
  MeshConfig mesh;
  TensorConfig tensor;
  // Each strategy's own options, parallel.<strategy>.*, registered with the strategy
  // (e.g. parallel.data_parallel.bucket_mb): options.get<T>("data_parallel").
  SectionSet options{"parallel"};
};

struct TrainConfig {
  int epochs = 1;
  std::int64_t max_steps = 0;         // 0 = run all epochs
  std::int64_t eval_every_steps = 0;  // 0 = evaluate at each epoch end only
  int eval_every_epochs = 1;          // 0 = not at epoch ends
  bool eval_at_start = false;         // also evaluate before the first step (DiNNO does)
  // false: evaluation lines go to the run's log file but not to the console (DiNNO's
  // verbose_evals: false).
  bool log_evals = true;
  std::int64_t log_every_steps = 50;
  double target_accuracy = 0.0;  // stop when test top-1 reaches it (0 = never)
  std::int64_t checkpoint_every_steps = 0;
  int checkpoint_every_epochs = 1;  // 0 = only at the end
  int keep_checkpoints = 0;         // the newest N checkpoint files are kept; 0 = every one
  std::uint64_t seed = 0;
  int threads = 0;              // intra-op threads per worker; 0 = cores / local workers
  Device device = Device::Cpu;  // cpu | cuda
  // fp32 | bf16 (CPU autocast) | fp16 (fp16 numerics with dynamic loss scaling; README "Mixed
  // precision"). Master weights and optimizer state stay float32.
  Precision precision = Precision::Fp32;
  // Read each step's loss on the host at the step's end (per-step times are then the device's, as
  // with CUDA_LAUNCH_BLOCKING); false: only where something is logged, evaluated or checkpointed
  // (util/DeviceScalar.h, Note [Reading a step's figures]). The figures are the same either way.
  bool sync_every_step = false;
  // train.device cuda: cuDNN's autotuner (auto: on, torch.backends.cudnn.benchmark) and the
  // precision of float32 matrix products (highest: no TF32, PyTorch's default; high, medium: TF32).
  // cuDNN's convolutions use TF32 as PyTorch's default has it.
  AutoBool cudnn_benchmark = AutoBool::Auto;  // auto | true | false
  MatmulPrecision float32_matmul_precision = MatmulPrecision::Highest;
  // Convolutional models' 4-D weights and image batches in channels-last (NHWC) order
  // (model.to(memory_format=torch.channels_last)); auto: on a GPU, where cuDNN's NHWC kernels are
  // faster under autocast; true on the CPU too (oneDNN), refused for a model with no 4-D weights.
  AutoBool channels_last = AutoBool::Auto;  // auto | true | false
  // train.device cuda: capture the step in a CUDA graph after a few eager steps and replay it
  // (train/CudaGraphStep.h, Note [Capturing the step in a CUDA graph]); local strategy, sgd.
  bool cuda_graph = false;
  // Recompute the activations of the model's blocks (transformer and residual blocks, a model of
  // one's own's stages) in backward instead of keeping them (models/Recompute.h): none, full (every
  // block) or selective (every activation_checkpointing_every-th block, torchtitan's
  // selective_ac_option). The weights are those of a run without it, bit for bit.
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::None;
  int activation_checkpointing_every = 0;  // selective: recompute every k-th block; 0 = every 2nd
};

struct RunConfig {
  std::string name = "run";
  std::string out_dir = "runs";  // where run folders are made
  // dated: <out_dir>/<YYYYmmdd-HHMMSS>_<name>/, a new folder every run; named: the dAD paper's
  // <out_dir>/<name>/, refused when an earlier run left it, unless --resume continues that run.
  RunFolder run_folder = RunFolder::Dated;
  int nproc = 1;  // workers started by `dtrain train --nproc` (the config's default)
  DataConfig data;
  ModelConfig model;
  OptimConfig optim;
  ParallelConfig parallel;
  TrainConfig train;
};

}  // namespace dtrain::config
