// Network: the one interface every dtrain model has, so the trainer and the parallel strategies
// treat an MLP, a ResNet or a transformer alike. A model is a sequence of stages in forward order
// (a torch::nn::Sequential), which is what pipeline parallelism splits across ranks.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
};

using NetworkPtr = std::shared_ptr<Network>;

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
