// model.init_from with a Hugging Face ALBERT checkpoint: a model.safetensors written here byte by
// byte (and the same tensors as a pytorch_model.bin) loads by Hugging Face's names, and the logits
// equal a float64 computation from the paper's formulas written below, not the model's code; a
// missing or misshapen tensor is refused by name, a missing classifier is a fresh head said in the
// log, and a pickle that calls anything is refused.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/Albert.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/train/Transfer.h"
#include "support/ScratchDir.h"

namespace dtrain::train {
namespace {

using Weights = std::map<std::string, at::Tensor>;
constexpr std::int64_t kVocab = 40, kE = 8, kH = 12, kHeads = 3, kFfn = 20, kPositions = 16, kLayers = 3,
                       kClasses = 3, kT = 10;
const std::string kLayer = "albert.encoder.albert_layer_groups.0.albert_layers.0.";

config::ModelConfig albert_config() {
  config::ModelConfig config;
  config.name = "albert";
  config.size = config::ModelSize::Tiny;
  config.albert.embedding_size = kE;
  config.albert.hidden_size = kH;
  config.albert.num_heads = kHeads;
  config.albert.intermediate_size = kFfn;
  config.albert.max_positions = kPositions;
  config.albert.num_layers = kLayers;
  return config;
}

models::NetworkPtr fresh_albert(const config::ModelConfig& config = albert_config()) {
  torch::manual_seed(123);
  auto spec = models::InputSpec::tokens(kVocab, kT, kClasses);
  spec.pad_id = 0;  // the padding of ids() below
  auto network = models::create_model(config, spec);
  network->eval();
  return network;
}

// AlbertForSequenceClassification's tensors at the sizes above, in float64, drawn large enough
// that every part of the model moves the logits.
Weights known_tensors() {
  torch::manual_seed(7);
  const auto opts = torch::kDouble;
  const auto matrix = [&](std::int64_t out, std::int64_t in) {
    return torch::randn({out, in}, opts) / std::sqrt(in);
  };
  const auto vector = [&](std::int64_t n) { return 0.1 * torch::randn({n}, opts); };
  const auto gamma = [&](std::int64_t n) { return 1.0 + 0.1 * torch::randn({n}, opts); };
  Weights w;
  w["albert.embeddings.word_embeddings.weight"] = torch::randn({kVocab, kE}, opts);
  w["albert.embeddings.position_embeddings.weight"] = torch::randn({kPositions, kE}, opts);
  w["albert.embeddings.token_type_embeddings.weight"] = torch::randn({2, kE}, opts);
  w["albert.embeddings.LayerNorm.weight"] = gamma(kE);
  w["albert.embeddings.LayerNorm.bias"] = vector(kE);
  w["albert.encoder.embedding_hidden_mapping_in.weight"] = matrix(kH, kE);
  w["albert.encoder.embedding_hidden_mapping_in.bias"] = vector(kH);
  for (const char* name : {"query", "key", "value", "dense"}) {
    w[kLayer + "attention." + name + ".weight"] = matrix(kH, kH);
    w[kLayer + "attention." + name + ".bias"] = vector(kH);
  }
  w[kLayer + "attention.LayerNorm.weight"] = gamma(kH);
  w[kLayer + "attention.LayerNorm.bias"] = vector(kH);
  w[kLayer + "ffn.weight"] = matrix(kFfn, kH);
  w[kLayer + "ffn.bias"] = vector(kFfn);
  w[kLayer + "ffn_output.weight"] = matrix(kH, kFfn);
  w[kLayer + "ffn_output.bias"] = vector(kH);
  w[kLayer + "full_layer_layer_norm.weight"] = gamma(kH);
  w[kLayer + "full_layer_layer_norm.bias"] = vector(kH);
  w["albert.pooler.weight"] = matrix(kH, kH);
  w["albert.pooler.bias"] = vector(kH);
  w["classifier.weight"] = matrix(kClasses, kH);
  w["classifier.bias"] = vector(kClasses);
  return w;
}

// The paper's (and BERT's) formulas in float64, straight from the tensors by their names.
torch::Tensor reference_logits(const Weights& w, const torch::Tensor& ids, std::int64_t pad_id = 0) {
  const auto at = [&](const std::string& name) { return w.at(name).to(torch::kDouble); };
  const auto linear = [&](const torch::Tensor& x, const std::string& name) {
    return torch::matmul(x, at(name + ".weight").t()) + at(name + ".bias");
  };
  const auto layer_norm = [&](const torch::Tensor& x, const std::string& name) {
    const auto mean = x.mean(-1, true);
    const auto var = (x - mean).pow(2).mean(-1, true);
    return (x - mean) / torch::sqrt(var + 1e-12) * at(name + ".weight") + at(name + ".bias");
  };
  const auto gelu_new = [](const torch::Tensor& x) {
    return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
  };
  const auto n = ids.size(0), t = ids.size(1), d = kH / kHeads;
  auto e = at("albert.embeddings.word_embeddings.weight").index_select(0, ids.reshape(-1)).view({n, t, kE}) +
           at("albert.embeddings.position_embeddings.weight").narrow(0, 0, t).unsqueeze(0) +
           at("albert.embeddings.token_type_embeddings.weight")[0];
  auto h = linear(layer_norm(e, "albert.embeddings.LayerNorm"), "albert.encoder.embedding_hidden_mapping_in");
  const auto key_is_pad = ids.eq(pad_id).view({n, 1, 1, t});
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    const auto heads = [&](const std::string& name) {
      return linear(h, kLayer + "attention." + name).view({n, t, kHeads, d}).permute({0, 2, 1, 3});
    };
    auto scores = torch::matmul(heads("query"), heads("key").transpose(-1, -2)) / std::sqrt(double(d));
    scores = scores.masked_fill(key_is_pad, -std::numeric_limits<double>::infinity());
    const auto context =
        torch::matmul(torch::softmax(scores, -1), heads("value")).permute({0, 2, 1, 3}).reshape({n, t, kH});
    const auto a =
        layer_norm(h + linear(context, kLayer + "attention.dense"), kLayer + "attention.LayerNorm");
    const auto f = linear(gelu_new(linear(a, kLayer + "ffn")), kLayer + "ffn_output");
    h = layer_norm(f + a, kLayer + "full_layer_layer_norm");
  }
  const auto pooled = torch::tanh(linear(h.select(1, 0), "albert.pooler"));
  return linear(pooled, "classifier");
}

// A safetensors file written byte by byte: the header's JSON by hand, float32 data little-endian.
void write_safetensors_by_hand(const std::filesystem::path& path, const Weights& weights) {
  std::string header = "{", data;
  for (const auto& [name, tensor] : weights) {
    const auto f = tensor.to(torch::kFloat).contiguous();
    std::string shape;
    for (const auto s : f.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(s);
    const auto begin = data.size();
    data.append(static_cast<const char*>(f.data_ptr()), f.nbytes());
    header += (header.size() > 1 ? "," : "") +
              ("\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
               std::to_string(begin) + "," + std::to_string(data.size()) + "]}");
  }
  header += "}";
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << length << header << data;
}

// (3, T) ids with padding (0) at the ends of two rows; [CLS]-like id 2 first.
torch::Tensor token_ids() {
  torch::manual_seed(11);
  auto ids = torch::randint(1, kVocab, {3, kT}, torch::kLong);
  ids.select(1, 0).fill_(2);
  ids[0].narrow(0, 6, kT - 6).fill_(0);
  ids[2].narrow(0, 3, kT - 3).fill_(0);
  return ids;
}

void expect_reference_logits(models::Network& network, const Weights& weights) {
  torch::NoGradGuard no_grad;
  const auto ids = token_ids();
  const auto logits = network.forward(ids).to(torch::kDouble);
  const auto expected = reference_logits(weights, ids);
  EXPECT_GT(expected.abs().max().item<double>(), 0.1) << "logits too small to tell anything";
  const double error = (logits - expected).abs().max().item<double>();
  ::testing::Test::RecordProperty("max_abs_error", fmt::format("{:.3g}", error));
  EXPECT_LT(error, 1e-5) << "dtrain\n" << logits << "\nfloat64 reference\n" << expected;
}

TEST(AlbertHuggingFace, SafetensorsLogitsEqualTheFloat64Reference) {
  dtrain::testing::ScratchDir dir;
  const auto weights = known_tensors();
  write_safetensors_by_hand(dir.path() / "model.safetensors", weights);
  auto network = fresh_albert();
  auto config = albert_config();
  config.init_from = dir.path().string();  // the folder save_pretrained writes
  const auto report = apply_transfer(*network, config);
  EXPECT_EQ(report.source, (dir.path() / "model.safetensors").string());
  EXPECT_EQ(report.loaded.size(), weights.size());
  EXPECT_TRUE(report.kept.empty());
  expect_reference_logits(*network, weights);
}

TEST(AlbertHuggingFace, PytorchModelBinLoadsTheSameTensors) {
  dtrain::testing::ScratchDir dir;
  auto weights = known_tensors();
  Weights as_saved;  // as save_pretrained keeps them: float32, and the position ids buffer
  for (const auto& [name, tensor] : weights) as_saved[name] = tensor.to(torch::kFloat);
  as_saved["albert.embeddings.position_ids"] = torch::arange(kPositions, torch::kLong).unsqueeze(0);
  io::export_state_dict(dir.path() / "pytorch_model.bin", as_saved);
  auto network = fresh_albert();
  auto config = albert_config();
  config.init_from = (dir.path() / "pytorch_model.bin").string();
  const auto report = apply_transfer(*network, config);
  EXPECT_EQ(report.loaded.size(), weights.size());
  EXPECT_TRUE(report.unused.empty()) << report.unused.front();
  expect_reference_logits(*network, weights);
}

TEST(AlbertHuggingFace, AnAlbertModelWithoutItsPrefixLoadsAndTheHeadIsFresh) {
  dtrain::testing::ScratchDir dir;
  Weights bare;
  for (const auto& [name, tensor] : known_tensors()) {
    if (name.rfind("albert.", 0) == 0) bare[name.substr(7)] = tensor;
  }
  bare["predictions.dense.weight"] = torch::zeros({kE, kH});  // a pre-training head: unused
  write_safetensors_by_hand(dir.path() / "model.safetensors", bare);
  auto network = fresh_albert();
  const auto head_before = network->named_parameters()["layers.2.classifier.weight"].clone();
  const auto report = load_hugging_face(*network, dir.path() / "model.safetensors", /*strict=*/true);
  EXPECT_EQ(report.loaded.size(), bare.size() - 1);
  ASSERT_EQ(report.kept.size(), 2u);
  EXPECT_NE(report.kept[0].find("classifier.weight is not in the file: a fresh classification head"),
            std::string::npos)
      << report.kept[0];
  EXPECT_EQ(report.unused, std::vector<std::string>{"predictions.dense.weight"});
  EXPECT_TRUE(torch::equal(network->named_parameters()["layers.2.classifier.weight"], head_before));
  std::string log;
  for (const auto& line : report.lines()) log += line + "\n";
  EXPECT_NE(log.find("kept layers.2.classifier.weight (classifier.weight is not in the file"),
            std::string::npos)
      << log;
}

void expect_refused(const Weights& weights, const std::vector<std::string>& said,
                    const config::ModelConfig& config = albert_config()) {
  dtrain::testing::ScratchDir dir;
  const auto file = dir.path() / "model.safetensors";
  write_safetensors_by_hand(file, weights);
  auto network = fresh_albert(config);
  auto with_file = config;
  with_file.init_from = file.string();
  try {
    apply_transfer(*network, with_file);
    FAIL() << "loaded; expected a refusal naming " << said.front();
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(file.string()), std::string::npos) << message;
    for (const auto& s : said) EXPECT_NE(message.find(s), std::string::npos) << message;
  }
}

TEST(AlbertHuggingFace, MissingTensorIsRefusedByName) {
  auto weights = known_tensors();
  weights.erase(kLayer + "ffn.weight");
  expect_refused(weights, {kLayer + "ffn.weight", "layers.0.encoder.albert_layer.ffn.weight"});
}

TEST(AlbertHuggingFace, MisshapenTensorIsRefusedByName) {
  auto weights = known_tensors();
  weights["albert.embeddings.word_embeddings.weight"] = torch::zeros({30000, kE});
  expect_refused(weights, {"albert.embeddings.word_embeddings.weight", "[30000, 8]", "[40, 8]"});
  auto head = known_tensors();
  head["classifier.weight"] = torch::zeros({2, kH});
  expect_refused(head, {"classifier.weight", "model.init_strict: false"});
}

TEST(AlbertHuggingFace, HeadOfAnotherShapeIsFreshWhenNotStrict) {
  dtrain::testing::ScratchDir dir;
  auto weights = known_tensors();
  weights["classifier.weight"] = torch::zeros({2, kH});
  weights["classifier.bias"] = torch::zeros({2});
  write_safetensors_by_hand(dir.path() / "model.safetensors", weights);
  auto network = fresh_albert();
  const auto report = load_hugging_face(*network, dir.path() / "model.safetensors", /*strict=*/false);
  EXPECT_EQ(report.kept.size(), 2u);
  EXPECT_EQ(report.loaded.size(), weights.size() - 2);
}

TEST(AlbertHuggingFace, SeveralLayerGroupsAreRefused) {
  auto weights = known_tensors();
  weights["albert.encoder.albert_layer_groups.1.albert_layers.0.ffn.weight"] = torch::zeros({kFfn, kH});
  expect_refused(weights, {"albert_layer_groups.1", "shares one layer"});
}

TEST(AlbertHuggingFace, AModelThatReadsNoneRefusesIt) {
  dtrain::testing::ScratchDir dir;
  write_safetensors_by_hand(dir.path() / "model.safetensors", known_tensors());
  config::ModelConfig mlp;
  mlp.name = "mlp";
  auto network = models::create_model(mlp, models::InputSpec::image(1, 4, 4, 2));
  EXPECT_THROW(load_hugging_face(*network, dir.path() / "model.safetensors", true), std::invalid_argument);
}

// pickle protocol 0: os.system("touch MARKER"), in torch.save's zip layout.
TEST(AlbertHuggingFace, PytorchModelBinWhosePickleCallsAnythingIsRefused) {
  dtrain::testing::ScratchDir dir;
  const auto marker = dir.path() / "ran";
  const auto file = dir.path() / "pytorch_model.bin";
  {
    const std::string pickle = "cos\nsystem\n(S'touch " + marker.string() + "'\ntR.";
    caffe2::serialize::PyTorchStreamWriter writer(file.string());
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
  }
  auto network = fresh_albert();
  auto config = albert_config();
  config.init_from = file.string();
  try {
    apply_transfer(*network, config);
    ADD_FAILURE() << "a pickle calling os.system was loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(marker)) << "loading ran os.system";
}

// The peer: Hugging Face transformers' AlbertForSequenceClassification, a small random one saved
// with save_pretrained, and its logits on the same tokens (padding masked by attention_mask).
constexpr const char* kPeerScript = R"(
import json, sys, torch
from transformers import AlbertConfig, AlbertForSequenceClassification
out, ids = sys.argv[1], torch.tensor(json.loads(sys.argv[2]))
torch.manual_seed(0)
config = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=3,
                      num_attention_heads=3, intermediate_size=20, max_position_embeddings=16,
                      num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
model = AlbertForSequenceClassification(config).eval()
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0.0, 0.3)
model.save_pretrained(out)
with torch.no_grad():
    logits = model(input_ids=ids, attention_mask=(ids != 0).long()).logits
json.dump(logits.tolist(), open(out + "/logits.json", "w"))
)";

// Python's torch.save of a module's state_dict(): an OrderedDict carrying _metadata, as older
// transformers write pytorch_model.bin.
TEST(AlbertHuggingFace, PythonTorchSaveOfAStateDictLoads) {
  std::string python;
  for (const std::string p : {"python3", "/usr/bin/python3"}) {
    if (python.empty() && std::system((p + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0) python = p;
  }
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian python3-torch) is installed";
  dtrain::testing::ScratchDir dir;
  const auto weights = known_tensors();
  Weights as_float;
  for (const auto& [name, tensor] : weights) as_float[name] = tensor.to(torch::kFloat);
  io::export_state_dict(dir.path() / "plain.pt", as_float);
  const auto bin = dir.path() / "pytorch_model.bin";
  const std::string command =
      python + " -c \"import collections, torch; d = torch.load('" + (dir.path() / "plain.pt").string() +
      "'); s = collections.OrderedDict(sorted(d.items())); "
      "s._metadata = collections.OrderedDict([('', {'version': 1})]); torch.save(s, '" +
      bin.string() + "')\" > " + (dir.path() / "log").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << std::ifstream(dir.path() / "log").rdbuf();
  auto network = fresh_albert();
  auto config = albert_config();
  config.init_from = bin.string();
  EXPECT_EQ(apply_transfer(*network, config).loaded.size(), weights.size());
  expect_reference_logits(*network, weights);
}

std::string python_with_transformers() {
  for (const std::string python : {"python3", "/usr/bin/python3"}) {
    if (std::system((python + " -c 'import transformers, torch' > /dev/null 2>&1").c_str()) == 0)
      return python;
  }
  return "";
}

TEST(AlbertHuggingFace, LogitsEqualTransformersOnItsOwnCheckpoint) {
  const auto python = python_with_transformers();
  if (python.empty())
    GTEST_SKIP() << "no python3 with transformers and torch is installed (pip install transformers)";
  dtrain::testing::ScratchDir dir;
  std::ofstream(dir.path() / "peer.py") << kPeerScript;
  const auto ids = token_ids();
  nlohmann::json ids_json = nlohmann::json::array();
  for (std::int64_t i = 0; i < ids.size(0); ++i) {
    nlohmann::json row = nlohmann::json::array();
    for (std::int64_t j = 0; j < ids.size(1); ++j) row.push_back(ids[i][j].item<std::int64_t>());
    ids_json.push_back(row);
  }
  const auto model_dir = dir.path() / "model";
  const std::string command = python + " " + (dir.path() / "peer.py").string() + " " + model_dir.string() +
                              " '" + ids_json.dump() + "' > " + (dir.path() / "peer.log").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << std::ifstream(dir.path() / "peer.log").rdbuf();
  const auto expected_json = nlohmann::json::parse(std::ifstream(model_dir / "logits.json"));
  auto expected = torch::zeros({ids.size(0), kClasses}, torch::kDouble);
  for (std::int64_t i = 0; i < ids.size(0); ++i) {
    for (std::int64_t c = 0; c < kClasses; ++c) expected[i][c] = expected_json[i][c].get<double>();
  }
  auto network = fresh_albert();
  auto config = albert_config();
  config.init_from = model_dir.string();
  const auto report = apply_transfer(*network, config);
  EXPECT_TRUE(report.kept.empty());
  torch::NoGradGuard no_grad;
  const auto logits = network->forward(ids).to(torch::kDouble);
  EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-5) << logits << "\ntransformers\n" << expected;
}

}  // namespace
}  // namespace dtrain::train
