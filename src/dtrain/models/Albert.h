// ALBERT (Lan et al. 2020, "ALBERT: A Lite BERT"): BERT's post-norm encoder with a factorized
// embedding (vocab x E, then a Linear E -> H) and ONE transformer layer whose parameters every layer
// uses, so its gradient is the sum of what each application contributes. Module and parameter names
// follow Hugging Face's AlbertForSequenceClassification so that its checkpoints map by a rule
// (AlbertWeights.cpp): the network's stages are
//   layers.0  the ALBERT body: embeddings.* and encoder.{embedding_hidden_mapping_in, albert_layer}.*
//             (Hugging Face: albert.embeddings.*, albert.encoder.embedding_hidden_mapping_in.*,
//             albert.encoder.albert_layer_groups.0.albert_layers.0.*), token ids -> (N, T, H);
//   layers.1  the pooler: dense + tanh on position 0 ([CLS]) (albert.pooler.*);
//   layers.2  the classification head: dropout + Linear (classifier.*).
// Padding tokens (ids equal to the data set's pad id, InputSpec::pad_id) are masked out as keys of every
// attention; with no pad id (-1) nothing is.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>

#include "dtrain/config/RunConfig.h"
#include "dtrain/models/HuggingFace.h"
#include "dtrain/models/Linear.h"
#include "dtrain/models/Network.h"

namespace dtrain::models {

struct AlbertOptions {
  std::int64_t vocab_size = 30000;
  std::int64_t embedding_size = 128;  // E
  std::int64_t hidden_size = 768;     // H
  std::int64_t num_layers = 12;       // applications of the shared layer
  std::int64_t num_heads = 12;
  std::int64_t intermediate_size = 3072;
  std::int64_t max_positions = 512;
  std::int64_t type_vocab_size = 2;  // token types (segments); dtrain's inputs are all type 0
  std::int64_t pad_id = 0;           // -1: sequences are not padded, nothing is masked
  std::int64_t num_classes = 2;
  double dropout = 0.0;  // hidden and attention dropout (ALBERT v2: 0)
  double classifier_dropout = 0.1;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;  // weights ~ N(0, 0.02), as BERT and ALBERT initialise
};

// The paper's sizes (base: H 768, E 128, 12 layers, 12 heads, FFN 3072; large: H 1024, 24 layers,
// 16 heads, FFN 4096) and a tiny one for tests (H 32, E 16, 2 layers, 2 heads, FFN 64, 128 positions).
AlbertOptions albert_size(config::ModelSize size);

// model.size with model.albert.* over it and model.dropout, the vocabulary (the data set's unless
// model.albert.vocab_size), the pad id and the classes from `input`. Throws std::invalid_argument
// naming the setting for what ALBERT cannot take (heads not dividing H, sequences longer than the
// positions, a vocabulary smaller than the data's).
AlbertOptions albert_options(const config::ModelConfig& config, const InputSpec& input);

// BERT's embeddings at width E: word + position + token type (0), LayerNorm, dropout.
// (N, T) int64 ids -> (N, T, E).
class AlbertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit AlbertEmbeddingsImpl(const AlbertOptions& options);
  torch::Tensor forward(const torch::Tensor& ids);

 private:
  torch::nn::Embedding word_embeddings_{nullptr};
  torch::nn::Embedding position_embeddings_{nullptr};
  torch::nn::Embedding token_type_embeddings_{nullptr};
  torch::nn::LayerNorm layer_norm_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(AlbertEmbeddings);

// Post-norm self-attention: LayerNorm(x + dropout(dense(attention(x)))). `padding` (N, T) bool, true
// where the key is padding: those keys get the lowest score before the softmax, so no query
// attends to them. (N, T, H) -> (N, T, H).
class AlbertAttentionImpl : public torch::nn::Module {
 public:
  explicit AlbertAttentionImpl(const AlbertOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& padding);

 private:
  std::int64_t heads_;
  Linear query_{nullptr};
  Linear key_{nullptr};
  Linear value_{nullptr};
  torch::nn::Dropout attention_dropout_{nullptr};
  Linear dense_{nullptr};
  torch::nn::Dropout output_dropout_{nullptr};
  torch::nn::LayerNorm layer_norm_{nullptr};
};
TORCH_MODULE(AlbertAttention);

// The one layer ALBERT shares: attention, then LayerNorm(a + ffn_output(gelu_new(ffn(a)))).
class AlbertLayerImpl : public torch::nn::Module {
 public:
  explicit AlbertLayerImpl(const AlbertOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& padding);

 private:
  AlbertAttention attention_{nullptr};
  Linear ffn_{nullptr};
  Linear ffn_output_{nullptr};
  torch::nn::LayerNorm full_layer_layer_norm_{nullptr};
};
TORCH_MODULE(AlbertLayer);

// The Linear E -> H and the shared layer applied num_layers times. (N, T, E) -> (N, T, H).
class AlbertTransformerImpl : public torch::nn::Module {
 public:
  explicit AlbertTransformerImpl(const AlbertOptions& options);
  torch::Tensor forward(const torch::Tensor& embedded, const torch::Tensor& padding);

  Linear embedding_hidden_mapping_in() const { return embedding_hidden_mapping_in_; }
  AlbertLayer albert_layer() const { return albert_layer_; }
  std::int64_t num_layers() const { return num_layers_; }

 private:
  std::int64_t num_layers_;
  Linear embedding_hidden_mapping_in_{nullptr};
  // Registered once, applied num_layers times: one set of parameters whose gradient autograd sums
  // over the applications (cross-layer parameter sharing).
  AlbertLayer albert_layer_{nullptr};
};
TORCH_MODULE(AlbertTransformer);

// Stage 0: token ids (N, T) -> hidden states (N, T, H), the padding mask derived from the ids.
class AlbertBodyImpl : public torch::nn::Module {
 public:
  explicit AlbertBodyImpl(const AlbertOptions& options);
  torch::Tensor forward(torch::Tensor ids);

  AlbertEmbeddings embeddings() const { return embeddings_; }
  AlbertTransformer encoder() const { return encoder_; }
  std::int64_t pad_id() const { return pad_id_; }

 private:
  std::int64_t pad_id_;
  std::int64_t max_positions_;
  AlbertEmbeddings embeddings_{nullptr};
  AlbertTransformer encoder_{nullptr};
};
TORCH_MODULE(AlbertBody);

// Stage 1: tanh(pooler(h[:, 0])). (N, T, H) -> (N, H).
class AlbertPoolerImpl : public torch::nn::Module {
 public:
  explicit AlbertPoolerImpl(const AlbertOptions& options);
  torch::Tensor forward(torch::Tensor hidden);

 private:
  Linear pooler_{nullptr};
};
TORCH_MODULE(AlbertPooler);

// Stage 2: classifier(dropout(pooled)). (N, H) -> (N, classes).
class AlbertClassifierImpl : public torch::nn::Module {
 public:
  explicit AlbertClassifierImpl(const AlbertOptions& options);
  torch::Tensor forward(torch::Tensor pooled);

 private:
  torch::nn::Dropout dropout_{nullptr};
  Linear classifier_{nullptr};
};
TORCH_MODULE(AlbertClassifier);

// The three stages as a Network of kind "albert", initialised as BERT is (Linear and embedding
// weights ~ N(0, initializer_range), biases 0, the padding row 0, LayerNorm 1 and 0).
NetworkPtr make_albert(const AlbertOptions& options);

// The Hugging Face name of an albert parameter or buffer: "layers.0." is "albert.", the shared layer
// "encoder.albert_layer." is "encoder.albert_layer_groups.0.albert_layers.0.", "layers.1.pooler." is
// "albert.pooler." and "layers.2.classifier." is "classifier.". Throws std::invalid_argument for a
// name that is not albert's.
std::string albert_hugging_face_name(const std::string& name);

// AlbertForSequenceClassification's tensors (or AlbertModel's, without the "albert." prefix; the
// pre-training heads are unused) for an albert network (HuggingFace.h). A checkpoint of more than one
// layer group or inner layer (num_hidden_groups, inner_group_num > 1) is refused: this ALBERT shares
// one layer. A missing classifier (a pre-trained body) keeps its fresh initialisation.
ImportedWeights import_albert(const std::map<std::string, at::Tensor>& file, const Network& network,
                              bool strict, const std::string& source);

}  // namespace dtrain::models
