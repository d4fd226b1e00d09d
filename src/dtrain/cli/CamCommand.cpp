// `dtrain cam RUN_DIR --images FILE... | --test-index I,... [--classes top|topK|C,...]`: class
// activation maps (as the Horovod/FSDP/pipeline study draws them) of a trained run whose model ends
// in global average pooling (resnet18, resnet50). Per image and class a PNG of the input, its heat
// map and their blend; one grid PNG comparing the classes of every image; cam.json listing them
// with the logits.
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtrain/cli/Commands.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/ImageFolder.h"
#include "dtrain/data/Transforms.h"
#include "dtrain/io/JsonFile.h"
#include "dtrain/models/Cam.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/train/Transfer.h"

namespace dtrain::cli {
namespace {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;

struct CamArgs {
  std::string run_dir;
  std::vector<std::string> images;
  std::vector<std::int64_t> test_index;
  std::string classes = "top";
  std::string out;
  std::string weights;
  double alpha = 0.5;
  int size = 128;
};

// One image to explain: what it is called, its pixels for display (C, H, W) in [0, 1], and the
// model's input (C, H, W) as the run's data set prepares it.
struct CamInput {
  std::string name;
  torch::Tensor pixels;
  torch::Tensor input;
};

// Per-image min-max to [0, 1]: synthetic data sets hold floats of any range.
torch::Tensor displayable(const torch::Tensor& x) {
  const auto low = x.min(), high = x.max();
  if ((high - low).item<double>() <= 0) return torch::zeros_like(x);
  return (x - low) / (high - low);
}

// An image file in the run's shape: decoded to RGB, to grey by luminance (ITU-R BT.601) for a
// one-channel data set, resized as data/ImageFolder resizes, scaled to [0, 1].
torch::Tensor read_image_as(const std::string& path, std::int64_t channels, std::int64_t height,
                            std::int64_t width) {
  if (!fs::is_regular_file(path))
    throw std::invalid_argument(fmt::format("--images: {}: no such file", path));
  auto rgb = data::decode_image(path).to(torch::kFloat);  // (3, h, w) 0..255
  if (channels == 1) {
    rgb = (rgb[0] * 0.299 + rgb[1] * 0.587 + rgb[2] * 0.114).unsqueeze(0);
  } else if (channels != 3) {
    throw std::invalid_argument(fmt::format(
        "--images: the run's data has {} channels; image files can feed models of 1 or 3 channels only",
        channels));
  }
  if (rgb.size(1) != height || rgb.size(2) != width) {
    rgb = F::interpolate(rgb.unsqueeze(0), F::InterpolateFuncOptions()
                                               .size(std::vector<std::int64_t>{height, width})
                                               .mode(torch::kBilinear)
                                               .align_corners(false)
                                               .antialias(true))
              .squeeze(0);
  }
  return rgb.round_().clamp_(0, 255).div_(255.0);
}

// "top" (the predicted class), "topK" (the K highest logits), or class indices, comma-separated:
// the classes of one image, from its logits (classes).
std::vector<std::int64_t> classes_for(const std::string& spec, const torch::Tensor& logits) {
  const auto count = logits.size(0);
  std::vector<std::int64_t> out;
  std::stringstream tokens(spec);
  std::string token;
  while (std::getline(tokens, token, ',')) {
    if (token.rfind("top", 0) == 0) {
      std::int64_t k = 1;
      if (token.size() > 3) {
        const auto rest = token.substr(3);
        if (rest.find_first_not_of("0123456789") != std::string::npos || rest.size() > 6 ||
            std::stoll(rest) < 1) {
          throw std::invalid_argument(fmt::format("--classes: '{}' is not top or topK (e.g. top3)", token));
        }
        k = std::min<std::int64_t>(std::stoll(rest), count);
      }
      const auto top = std::get<1>(logits.topk(k));
      for (std::int64_t i = 0; i < k; ++i) out.push_back(top[i].item<std::int64_t>());
      continue;
    }
    if (token.empty() || token.find_first_not_of("0123456789") != std::string::npos || token.size() > 9 ||
        std::stoll(token) >= count) {
      throw std::invalid_argument(fmt::format(
          "--classes: '{}' is not a class of this run (0 to {}), top or topK; e.g. --classes top3 or 0,4",
          token, count - 1));
    }
    out.push_back(std::stoll(token));
  }
  if (out.empty())
    throw std::invalid_argument("--classes: empty; give top, topK or class indices such as 0,4");
  return out;
}

// RUN_DIR is a folder dtrain train wrote, and something is given to explain.
void check_cam_args(const CamArgs& a) {
  const fs::path run_dir(a.run_dir);
  if (!fs::is_directory(run_dir)) {
    throw std::invalid_argument(
        fmt::format("RUN_DIR: {}: no such folder; name a folder dtrain train wrote", a.run_dir));
  }
  if (!fs::is_regular_file(run_dir / "config.yaml")) {
    throw std::invalid_argument(
        fmt::format("RUN_DIR: {} has no config.yaml; name a folder dtrain train wrote", a.run_dir));
  }
  if (a.images.empty() && a.test_index.empty()) {
    throw std::invalid_argument("cam: nothing to explain; give --images FILE... or --test-index I,...");
  }
}

// The run's model as the run built it, for its data's shape, with its trained weights.
struct TrainedModel {
  data::DataSets datasets;
  std::vector<std::int64_t> shape;  // (C, H, W)
  models::NetworkPtr network;
  fs::path file;  // where the weights came from
};

// A data set or weights that cannot be read are inputs refused (Note [Exit codes]).
TrainedModel load_trained_model(const CamArgs& a, const config::RunConfig& cfg) {
  TrainedModel m;
  m.datasets = checking_inputs([&] { return data::load_datasets(cfg.data); });
  m.shape = m.datasets.train->input_shape();
  const auto& shape = m.shape;
  if (shape.size() != 3) {
    throw std::invalid_argument(
        fmt::format("model.name: {} reads token sequences; CAM needs images", cfg.model.name));
  }
  torch::manual_seed(cfg.train.seed);
  m.network = models::create_model(
      cfg.model, models::InputSpec::image(shape[0], shape[1], shape[2], m.datasets.train->num_classes()));
  models::find_gap_classifier(*m.network);  // refuses a model without global average pooling
  const std::string what = a.weights.empty() ? "RUN_DIR" : "--weights";
  m.file = train::weights_file(a.weights.empty() ? a.run_dir : a.weights, what);
  const auto weights = checking_inputs([&] { return train::read_model_weights(m.file, what); });
  try {
    train::load_matching(*m.network, weights, /*strict=*/true, m.file.string());
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(fmt::format(
        "{}: the weights in {} do not fit model {} as the run's config.yaml builds it; name the run's own "
        "folder or --weights of the same model",
        what, m.file.string(), cfg.model.name));
  }
  return m;
}

// The images, prepared as the run's test set is (normalised later with the training statistics).
std::vector<CamInput> cam_inputs(const CamArgs& a, const TrainedModel& m) {
  std::vector<CamInput> inputs;
  for (const auto& path : a.images) {
    const auto pixels = read_image_as(path, m.shape[0], m.shape[1], m.shape[2]);
    inputs.push_back({fs::path(path).stem().string(), pixels, pixels});
  }
  if (!a.test_index.empty()) {
    const auto* test = dynamic_cast<const data::ImageDataset*>(m.datasets.test.get());
    TORCH_INTERNAL_ASSERT(test, "an image data set's test split is an ImageDataset");
    for (const auto index : a.test_index) {
      if (index < 0 || index >= test->size()) {
        throw std::invalid_argument(
            fmt::format("--test-index: {} is outside the test set's 0 to {}", index, test->size() - 1));
      }
      auto x = test->images()[index].to(torch::kFloat);
      const bool bytes = test->images().scalar_type() == torch::kUInt8;
      if (bytes) x.div_(255.0);
      inputs.push_back({fmt::format("test{}", index), bytes ? x : displayable(x), x});
    }
  }
  return inputs;
}

// The forward pass over every input, the classes chosen for each image and their maps, upsampled
// to the size the images are shown at.
struct CamMaps {
  models::CamForward forward;
  torch::Tensor probabilities;                    // (N, classes)
  std::vector<std::vector<std::int64_t>> chosen;  // per image, the same count each
  torch::Tensor maps;                             // (N, J, factor * H, factor * W)
  std::int64_t factor = 1;                        // the inputs' enlargement
};

CamMaps cam_maps(const CamArgs& a, const config::RunConfig& cfg, const TrainedModel& m,
                 const std::vector<CamInput>& inputs) {
  CamMaps out;
  std::vector<torch::Tensor> batch;
  for (const auto& in : inputs) batch.push_back(in.input);
  auto x = torch::stack(batch);
  if (cfg.data.normalize) x = data::normalize(x, m.datasets.train->stats());
  out.forward = models::cam_forward(*m.network, x);
  out.probabilities = torch::softmax(out.forward.logits, 1);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    out.chosen.push_back(classes_for(a.classes, out.forward.logits[i]));
  const auto per_image = static_cast<std::int64_t>(out.chosen.front().size());
  auto classes = torch::empty({static_cast<std::int64_t>(inputs.size()), per_image}, torch::kLong);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    for (std::int64_t j = 0; j < per_image; ++j) classes[i][j] = out.chosen[i][j];
  }
  // Shown at about --size pixels: maps upsampled smoothly to that size, the input enlarged.
  const auto& shape = m.shape;
  out.factor = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(std::ceil(static_cast<double>(a.size) / std::max(shape[1], shape[2]))));
  out.maps = models::upsample_normalised(
      models::class_activation_maps(out.forward.features, out.forward.weight, classes), out.factor * shape[1],
      out.factor * shape[2]);
  return out;
}

// Per image and class a PNG (input | heat map | blend), grid.png and cam.json in `out`; cam.json's
// contents returned.
nlohmann::json write_cams(const CamArgs& a, const TrainedModel& m, const std::vector<CamInput>& inputs,
                          const CamMaps& cams, const fs::path& out) {
  fs::create_directories(out);
  const auto& forward = cams.forward;
  nlohmann::json summary;
  summary["run_dir"] = fs::path(a.run_dir).string();
  summary["weights"] = m.file.string();
  summary["model"] = m.network->kind();
  summary["feature_maps"] = forward.features.sizes().vec();
  summary["images"] = nlohmann::json::array();
  std::vector<torch::Tensor> grid_rows;
  constexpr std::int64_t kGap = 4;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto pixels = inputs[i].pixels.repeat_interleave(cams.factor, 1).repeat_interleave(cams.factor, 2);
    nlohmann::json entry;
    entry["name"] = inputs[i].name;
    entry["predicted"] = forward.logits[i].argmax().item<std::int64_t>();
    entry["probability"] = cams.probabilities[i].max().item<double>();
    entry["classes"] = nlohmann::json::array();
    std::vector<torch::Tensor> row;
    for (std::size_t j = 0; j < cams.chosen[i].size(); ++j) {
      const auto c = cams.chosen[i][j];
      const auto panels = models::render_cam(pixels, cams.maps[i][static_cast<std::int64_t>(j)], a.alpha);
      if (j == 0) row.push_back(panels.input);
      row.push_back(panels.blend);
      const auto path = out / fmt::format("{}_class{}.png", inputs[i].name, c);
      data::write_image(path.string(), models::image_row({panels.input, panels.heat, panels.blend}, kGap));
      entry["classes"].push_back({{"class", c},
                                  {"logit", forward.logits[i][c].item<double>()},
                                  {"probability", cams.probabilities[i][c].item<double>()},
                                  {"file", path.string()}});
    }
    grid_rows.push_back(models::image_row(row, kGap));
    summary["images"].push_back(entry);
  }
  const auto grid = out / "grid.png";
  data::write_image(grid.string(), models::image_column(grid_rows, kGap));
  summary["grid"] = grid.string();
  io::write_json_file(out / "cam.json", summary);
  return summary;
}

int run_cam(const CamArgs& a) {
  check_cam_args(a);
  const fs::path run_dir(a.run_dir);
  const auto cfg = config::load_run_config((run_dir / "config.yaml").string());
  const auto model = load_trained_model(a, cfg);
  const auto inputs = cam_inputs(a, model);
  const auto cams = cam_maps(a, cfg, model, inputs);
  const fs::path out = a.out.empty() ? run_dir / "cam" : fs::path(a.out);
  const auto summary = write_cams(a, model, inputs, cams, out);
  std::cerr << fmt::format("cam: {} image(s) x {} class(es) from {} -> {}\n", inputs.size(),
                           cams.chosen.front().size(), model.file.string(), out.string());
  std::cout << summary.dump() << std::endl;
  return kExitSuccess;
}

}  // namespace

Run add_cam_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "cam",
      "Class activation maps (Zhou et al. 2016) of a trained resnet18/resnet50 run: per image and class the "
      "input, its heat map and their blend as PNG, and a grid comparing the classes");
  auto a = std::make_shared<CamArgs>();
  cmd->add_option("run_dir", a->run_dir,
                  "The run folder (its config.yaml; model.pt, else its latest checkpoint)")
      ->required();
  cmd->add_option("--images", a->images, "PNG or JPEG files, resized to the run's input size");
  cmd->add_option("--test-index", a->test_index, "Samples of the run's test set by index, e.g. 0,5")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--classes", a->classes,
                  "top (the predicted class), topK (the K highest, e.g. top3) or class indices, e.g. 0,4")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Output folder (default RUN_DIR/cam)");
  cmd->add_option("--weights", a->weights, "A checkpoint or model.pt instead of the run's own");
  cmd->add_option("--alpha", a->alpha, "Weight of the heat map in the blend")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--size", a->size, "Pixels the images are shown at (enlarged by a whole factor)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->footer(
      "Example:\n"
      "  dtrain train configs/quickstart.yaml model.name=resnet18 nproc=1 train.max_steps=300 "
      "name=fmnist-resnet\n"
      "  dtrain cam runs/<date>_fmnist-resnet --test-index 0,1,2 --classes top3\n"
      "  dtrain cam runs/<date>_fmnist-resnet --images shoe.png --classes 7,9 --out cam-shoe\n"
      "writes <image>_class<c>.png (input | heat map | blend) per image and class, grid.png (rows: images; "
      "columns: input, then the blend for each class) and cam.json.");
  return [a] { return run_cam(*a); };
}

}  // namespace dtrain::cli
