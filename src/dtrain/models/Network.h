// Network: the one interface every dtrain model has, so the trainer and the parallel strategies
// treat an MLP, a ResNet or a transformer alike. A model is a sequence of stages in forward order
// (a torch::nn::Sequential), which is what pipeline parallelism splits across ranks.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dtrain::models {

// What the data looks like to the model: the shape of one sample and what the model predicts.
struct InputSpec {
  // (C, H, W) for images; (T) for token sequences.
  std::vector<std::int64_t> sample_shape{1, 28, 28};
  // Classifiers: the number of classes.
  std::int64_t num_classes = 10;
  // Token inputs (transformer): ids in [0, vocab_size); 0 = the inputs are images.
  std::int64_t vocab_size = 0;
  // Token inputs: the longest sequence the model accepts (positional embeddings are learned).
  std::int64_t seq_len = 0;
  // Token inputs: the id that pads a sequence (positions holding it are no part of the sentence:
  // attention's mask is token != pad_id); -1 = sequences are not padded.
  std::int64_t pad_id = -1;

  static InputSpec image(std::int64_t channels, std::int64_t height, std::int64_t width,
                         std::int64_t num_classes);
  // A character- or token-level sequence; num_classes is used by the encoder classifier only.
  static InputSpec tokens(std::int64_t vocab_size, std::int64_t seq_len, std::int64_t num_classes = 0);

  bool is_tokens() const { return vocab_size > 0; }
  // "1x28x28" or "tokens T=64 V=65".
  std::string describe() const;
};

class Network : public torch::nn::Module {
 public:
  // `layers` run in order on forward; `kind` is the registry name ("resnet18").
  Network(std::string kind, torch::nn::Sequential layers);

  // Classifiers: (N, ...) -> logits (N, classes); language model: (N, T) -> (N, T, vocab).
  virtual torch::Tensor forward(torch::Tensor input);

  const std::string& kind() const { return kind_; }
  // Convolutional networks on the CPU: forward() hands image batches to the first layer in
  // channels-last memory order, where oneDNN's convolutions are faster (about 1.3x for lenet5
  // on one thread here). Parameters keep their layout; the results are those of the same
  // convolutions up to rounding.
  void set_channels_last_on_cpu(bool on) { channels_last_on_cpu_ = on; }
  bool channels_last_on_cpu() const { return channels_last_on_cpu_; }
  // train.channels_last: image batches in channels-last order on any device, the 4-D weights made
  // so by the trainer (cuDNN's NHWC kernels on a GPU want both).
  void set_channels_last(bool on) { channels_last_ = on; }
  bool channels_last() const { return channels_last_; }
  // `input` in the memory order this network's first layer takes (channels-last for a 4-D batch
  // under either setting above, else unchanged).
  torch::Tensor in_memory_order(const torch::Tensor& input) const;
  // The sequence the forward pass runs, shared with this network (not a copy).
  torch::nn::Sequential layers() const { return layers_; }
  // The stages in forward order, each callable as stage.forward(tensor); they share this
  // network's parameters. A recomputed stage comes wrapped: its forward is recompute()'s, and its
  // module holds the stage's (same parameters, names under "stage.").
  std::vector<torch::nn::AnyModule> stages() const;
  // Whether the network is one module of a user's own, not a sequence of stages (network() over a
  // module that is not a torch::nn::Sequential): what a pipeline cannot cut.
  bool single_module() const { return single_module_; }
  void set_single_module(bool single) { single_module_ = single; }

  // The stages that are blocks (indices into stages(), ascending): the units activation
  // recomputation recomputes (train.activation_checkpointing, models/Recompute.h). A transformer's
  // encoder blocks, a ResNet's residual blocks; every stage of a model of one's own (network());
  // none for a model whose stages are single operations.
  const std::vector<std::size_t>& blocks() const { return blocks_; }
  void set_blocks(std::vector<std::size_t> stages);
  // The stages whose forward keeps only its input and is run again in backward (recompute()),
  // in forward() and in what stages() hands out. Empty: none (the default).
  void set_recomputed(std::vector<std::size_t> stages);
  bool recomputed(std::size_t stage) const;
  bool any_recomputed() const { return !recomputed_.empty(); }

  // A function of a stage's input run before it, or of its output run after it, in forward() and
  // in what stages() hands out (inside the stage's recomputation where it has one): tensor
  // parallelism's split of the sequence before the first block and its gather after the last
  // (parallel/TensorParallel.h). Null: none.
  using StageFunction = std::function<torch::Tensor(const torch::Tensor&)>;
  void set_stage_input(std::size_t stage, StageFunction function);
  void set_stage_output(std::size_t stage, StageFunction function);

  // Deferred initialisation (model.deferred_init, deferred_network(); Note [Deferred
  // initialisation]): the stages' parameters are shapes on the meta device until materialize()
  // builds the ones a rank keeps.
  bool deferred() const { return !builders_.empty(); }
  // Whether stage `stage` of a deferred network still holds meta parameters.
  bool stage_deferred(std::size_t stage) const;
  // Builds these stages again from the generator state each was first built from, so they hold
  // the weights an eager build gives, and keeps in each parameter what the cuts make of it (in the
  // order added; none: the whole tensor), on the device set_device() named. Stages already built are
  // left alone. Takes generator_mutex() and leaves the generator's state as it was.
  void materialize(const std::vector<std::size_t>& stages);
  void materialize_all();
  // What a rank keeps of a parameter built whole: `whole` -> the tensor to hold (a shard), for the
  // parameter's name in this network ("layers.1.attn.qkv.weight"). Tensor parallelism adds one
  // when it splits a deferred network's layers.
  using Cut = std::function<torch::Tensor(const std::string& name, const torch::Tensor& whole)>;
  void add_cut(Cut cut);
  // Where materialize() puts what it builds (a deferred network's parameters have no device
  // until then); the CPU unless set.
  void set_device(torch::Device device) { device_ = device; }
  torch::Device device() const { return device_; }
  // Calls `visit` with each stage built whole in turn (without the cuts), in order, each freed
  // before the next is built: what reads every weight of a deferred network (the run's hash of
  // its initial weights) without holding them all.
  void for_each_built_stage(
      const std::function<void(std::size_t stage, torch::nn::Module& built)>& visit) const;

 private:
  std::string kind_;
  torch::nn::Sequential layers_;
  std::vector<std::size_t> blocks_;
  std::vector<std::size_t> recomputed_;
  std::map<std::size_t, StageFunction> stage_inputs_;
  std::map<std::size_t, StageFunction> stage_outputs_;
  bool channels_last_on_cpu_ = false;
  bool channels_last_ = false;
  bool single_module_ = false;
  // Deferred initialisation: per stage, how to build it and the generator's state before it was.
  using StageBuilder = std::function<torch::nn::AnyModule()>;
  std::vector<StageBuilder> builders_;
  std::vector<torch::Tensor> generator_states_;
  std::vector<bool> stage_built_;
  std::vector<Cut> cuts_;
  torch::Device device_ = torch::kCPU;
  torch::nn::AnyModule build_stage(std::size_t stage) const;
  friend std::shared_ptr<Network> deferred_network(std::string kind, std::vector<StageBuilder> builders);
};

using NetworkPtr = std::shared_ptr<Network>;

// Note [Deferred initialisation]
// A model too large for one rank cannot be built whole on every rank and cut afterwards: a 400M
// parameter transformer is 1.6 GB a rank before tensor parallelism, the pipeline or a shard group
// throws most of it away. With model.deferred_init each stage of the network is built in turn and
// its parameters replaced at once by meta tensors of the same shapes (buffers stay: they are
// small), so building costs one stage's memory at a time; the network records, per stage, the
// state of torch's generator before the stage was built. What cuts the model (tensor parallelism's
// plan, the pipeline's stages) works on the shapes; then each rank materializes the stages it
// keeps: it sets the generator to the stage's recorded state, builds the stage again whole, and
// keeps its cut of each parameter. The weights are those an eager build gives, bit for bit, on every
// rank and for every mesh, so no rank broadcasts them. This is torchdistx's deferred_init (record
// a module's construction, replay it to materialize), replayed per stage rather than per operation
// since a stage's constructor is its recipe; torchtitan instead builds on the meta device and
// initialises each shard afresh (init_weights), which gives other weights than one process builds.
// A stage must draw from torch's global generator only, as create_model() requires of every model.
// Torch's global generator is one per process: every use of it that must not interleave with
// another thread's (ranks that are threads of one process build models at the same time) holds
// this mutex.
std::mutex& generator_mutex();

using StageBuilder = std::function<torch::nn::AnyModule()>;
// A network whose stages `builders` make, in order, built deferred (see the Note): each builder is
// called once now, its parameters turned to meta tensors, and again by materialize(). Like any
// model's construction it draws from the global generator: a caller whose process holds other ranks
// holds generator_mutex() around it.
NetworkPtr deferred_network(std::string kind, std::vector<StageBuilder> builders);
// The same stages built at once (what model.deferred_init: false builds): equal weights.
NetworkPtr eager_network(std::string kind, const std::vector<StageBuilder>& builders);

// A model of one's own as the Network the trainer and every strategy take. A torch::nn::Sequential's
// modules are the stages, in order (what pipeline cuts); the Network shares them, so training it
// trains `layers`. Parameter names gain the prefix "layers." ("layers.0.weight"), as the built-in
// models' have.
// Every stage is a block (train.activation_checkpointing recomputes stages): group layers that are
// recomputed together into one stage (a nested Sequential, or a module of one's own).
NetworkPtr network(std::string kind, torch::nn::Sequential layers);

// Any other module whose forward takes and returns one tensor (a torch::nn::ModuleHolder such as
// torch::nn::Linear or one's own TORCH_MODULE, or a std::shared_ptr to the module): one stage, so
// every strategy but pipeline takes it. Parameter names gain the prefix "layers.0.".
template <class ModuleType>
NetworkPtr network(std::string kind, std::shared_ptr<ModuleType> module) {
  torch::nn::Sequential layers;
  layers->push_back(std::move(module));
  auto out = std::make_shared<Network>(std::move(kind), std::move(layers));
  out->set_single_module(true);
  out->set_blocks({0});
  return out;
}
template <class ModuleType>
NetworkPtr network(std::string kind, torch::nn::ModuleHolder<ModuleType> module) {
  return network(std::move(kind), module.ptr());
}

}  // namespace dtrain::models
