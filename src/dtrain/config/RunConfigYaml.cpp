// RunConfig <-> YAML and JSON. One description of the fields (describe_run below) drives the
// reader, the writers and the comparison, so a field added to RunConfig.h and described here is
// loaded, validated, saved and round-tripped without further code.
#include "dtrain/config/RunConfigYaml.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <variant>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/YamlFile.h"

namespace dtrain::config {
namespace {

// The allowed values of every enumerated option, in the order error messages list them.
const std::vector<std::string> kDatasets{"fashion-mnist", "mnist",     "cifar10", "cifar100",
                                         "image-folder",  "synthetic", "text"};
const std::vector<std::string> kPartitions{"random", "hetero", "dirichlet", "kfold", "subset"};
const std::vector<std::string> kModels{"mlp",      "mnistnet", "lenet5",     "resnet18",
                                       "resnet50", "vit",      "transformer"};
const std::vector<std::string> kActivations{"relu", "tanh", "gelu", "sigmoid"};
const std::vector<std::string> kStems{"cifar", "imagenet"};
const std::vector<std::string> kTasks{"classifier", "lm"};
const std::vector<std::string> kSchedulers{"constant", "step", "cosine", "linear", "log"};
const std::vector<std::string> kOptimizers{"sgd", "adam", "adamw", "lbfgs"};
const std::vector<std::string> kLosses{"cross_entropy", "nll", "mse"};
const std::vector<std::string> kStrategies{"local", "data_parallel"};
const std::vector<std::string> kBackends{"gloo", "mpi", "nccl"};
const std::vector<std::string> kCompressions{"none", "fp16", "bf16"};
const std::vector<std::string> kDevices{"cpu", "cuda"};

constexpr double kInf = std::numeric_limits<double>::infinity();

struct IntRange {
  std::int64_t min = std::numeric_limits<std::int64_t>::min();
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
};
IntRange at_least(std::int64_t min) {
  return {min, std::numeric_limits<std::int64_t>::max()};
}

struct Range {
  double min = -kInf;
  double max = kInf;
  bool min_open = false;  // min itself excluded
  bool max_open = false;
};
const Range kPositive{0.0, kInf, true, false};
const Range kNonNegative{0.0, kInf, false, false};
const Range kUnitOpen{0.0, 1.0, false, true};  // [0, 1)
const Range kUnitClosed{0.0, 1.0, false, false};

enum class Text { Any, NonEmpty, Name };

// The fields of a RunConfig, described once. C is RunConfig or const RunConfig; V is a visitor
// with methods integer, number, boolean, choice, text, int_list, section and check.
template <class V, class C>
void describe_data(V& v, C& d) {
  v.choice("dataset", d.dataset, kDatasets);
  v.text("root", d.root, Text::Any);
  v.choice("partition", d.partition, kPartitions);
  v.integer("classes_per_rank", d.classes_per_rank, at_least(1));
  v.number("dirichlet_alpha", d.dirichlet_alpha, kPositive);
  v.integer("num_folds", d.num_folds, at_least(2));
  v.integer("fold", d.fold, IntRange{0, std::max<std::int64_t>(0, std::int64_t{d.num_folds} - 1)});
  v.integer("subset_size", d.subset_size, at_least(0));
  v.integer("test_subset_size", d.test_subset_size, at_least(0));
  v.integer("batch_size", d.batch_size, at_least(1));
  v.integer("eval_batch_size", d.eval_batch_size, at_least(1));
  v.boolean("drop_last", d.drop_last);
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

template <class V, class C>
void describe_model(V& v, C& m) {
  v.choice("name", m.name, kModels);
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
}

template <class V, class C>
void describe_scheduler(V& v, C& s) {
  v.choice("name", s.name, kSchedulers);
  v.integer("step_size", s.step_size, at_least(1));
  v.number("gamma", s.gamma, kPositive);
  v.integer("warmup_steps", s.warmup_steps, at_least(0));
  v.number("final_lr", s.final_lr, kNonNegative);
}

template <class V, class C>
void describe_optim(V& v, C& o) {
  v.choice("name", o.name, kOptimizers);
  v.number("lr", o.lr, kPositive);
  v.number("momentum", o.momentum, kNonNegative);
  v.boolean("nesterov", o.nesterov);
  v.number("weight_decay", o.weight_decay, kNonNegative);
  v.number("beta1", o.beta1, kUnitOpen);
  v.number("beta2", o.beta2, kUnitOpen);
  v.number("eps", o.eps, kPositive);
  v.integer("lbfgs_history", o.lbfgs_history, at_least(1));
  v.integer("lbfgs_max_iter", o.lbfgs_max_iter, at_least(1));
  v.choice("loss", o.loss, kLosses);
  v.section("scheduler", [&] { describe_scheduler(v, o.scheduler); });
}

template <class V, class C>
void describe_parallel(V& v, C& p) {
  v.choice("strategy", p.strategy, kStrategies);
  v.choice("backend", p.backend, kBackends);
  v.number("bucket_mb", p.bucket_mb, kPositive);
  v.integer("accumulation_steps", p.accumulation_steps, at_least(1));
  v.number("timeout_s", p.timeout_s, kPositive);
  v.choice("compression", p.compression, kCompressions);
  v.integer("poll_wait_us", p.poll_wait_us, at_least(0));
  v.integer("gloo_threads", p.gloo_threads, at_least(1));
}

template <class V, class C>
void describe_train(V& v, C& t) {
  v.integer("epochs", t.epochs, at_least(1));
  v.integer("max_steps", t.max_steps, at_least(0));
  v.integer("eval_every_steps", t.eval_every_steps, at_least(0));
  v.integer("eval_every_epochs", t.eval_every_epochs, at_least(1));
  v.integer("log_every_steps", t.log_every_steps, at_least(1));
  v.number("target_accuracy", t.target_accuracy, kUnitClosed);
  v.integer("checkpoint_every_steps", t.checkpoint_every_steps, at_least(0));
  v.integer("checkpoint_every_epochs", t.checkpoint_every_epochs, at_least(0));
  v.integer("seed", t.seed, IntRange{0, std::numeric_limits<std::int64_t>::max()});
  v.integer("threads", t.threads, at_least(0));
  v.choice("device", t.device, kDevices);
}

template <class V, class C>
void describe_run(V& v, C& c) {
  v.text("name", c.name, Text::Name);
  v.text("out_dir", c.out_dir, Text::NonEmpty);
  v.integer("nproc", c.nproc, at_least(1));
  v.section("data", [&] { describe_data(v, c.data); });
  v.section("model", [&] { describe_model(v, c.model); });
  v.section("optim", [&] { describe_optim(v, c.optim); });
  v.section("parallel", [&] { describe_parallel(v, c.parallel); });
  v.section("train", [&] { describe_train(v, c.train); });
}

// ---- helpers for messages ----------------------------------------------------------------------

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The closest candidate when it is close enough to be a likely typo, else "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  if (word.empty()) return best;
  std::size_t best_distance = std::max<std::size_t>(1, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    const auto d = edit_distance(word, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

// A quoted scalar ('64', "true") is a string in YAML, never a number or a boolean.
bool quoted(const YAML::Node& node) {
  return node.IsScalar() && node.Tag() == "!";
}

// The scalar a number or boolean is read from; nothing for a quoted string or a collection.
std::optional<std::string> plain_scalar(const YAML::Node& node) {
  if (!node.IsScalar() || quoted(node)) return std::nullopt;
  return node.Scalar();
}

std::string found(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return quoted(node) ? "the quoted string \"" + node.Scalar() + "\"" : "\"" + node.Scalar() + "\"";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

std::string describe(const IntRange& r) {
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  if (r.min == kMin && r.max == kMax) return "an integer";
  if (r.max == kMax) return r.min == 1 ? "a positive integer" : "an integer >= " + std::to_string(r.min);
  if (r.min == kMin) return "an integer <= " + std::to_string(r.max);
  if (r.min == r.max) return "the integer " + std::to_string(r.min);
  return "an integer in [" + std::to_string(r.min) + ", " + std::to_string(r.max) + "]";
}

std::string describe(const Range& r) {
  if (r.min == 0.0 && r.min_open && r.max == kInf) return "a positive number";
  if (r.max == kInf) return fmt::format("a number {} {}", r.min_open ? ">" : ">=", r.min);
  return fmt::format("a number in {}{}, {}{}", r.min_open ? "(" : "[", r.min, r.max, r.max_open ? ")" : "]");
}

bool in_range(double x, const Range& r) {
  if (x < r.min || (r.min_open && x == r.min)) return false;
  if (x > r.max || (r.max_open && x == r.max)) return false;
  return true;
}

std::optional<std::int64_t> parse_int(const std::string& s) {
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (begin != end && *begin == '+') ++begin;
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end) return std::nullopt;
  return value;
}

std::optional<double> parse_double(const std::string& s) {
  if (s.empty()) return std::nullopt;
  // strtod also reads "inf", "nan" and hexadecimal floats, which a configuration never means.
  for (const char c : s) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' ||
          c == '-')) {
      return std::nullopt;
    }
  }
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<bool> parse_bool(const std::string& s) {
  static const std::vector<std::string> kTrue{"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const std::vector<std::string> kFalse{"false", "False", "FALSE", "no", "No",
                                               "NO",    "off",   "Off",   "OFF"};
  if (std::find(kTrue.begin(), kTrue.end(), s) != kTrue.end()) return true;
  if (std::find(kFalse.begin(), kFalse.end(), s) != kFalse.end()) return false;
  return std::nullopt;
}

// Shortest text that reads back as the same double, always with a '.' or exponent so that every
// YAML reader (YAML 1.1 included) sees a float.
std::string format_double(double x) {
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  if (s.find('.') == std::string::npos) {
    const auto e = s.find_first_of("eE");
    if (e != std::string::npos) s.insert(e, ".0");
  }
  return s;
}

// ---- keys --------------------------------------------------------------------------------------

// Collects every dotted key, for suggestions across sections ("data.lr: did you mean optim.lr?").
class KeyCollector {
 public:
  std::vector<std::string> keys;

  template <class T, class R>
  void integer(const char* key, T&, const R&) {
    add(key);
  }
  template <class T, class R>
  void number(const char* key, T&, const R&) {
    add(key);
  }
  template <class T>
  void boolean(const char* key, T&) {
    add(key);
  }
  template <class T>
  void choice(const char* key, T&, const std::vector<std::string>&) {
    add(key);
  }
  template <class T>
  void text(const char* key, T&, Text) {
    add(key);
  }
  template <class T>
  void int_list(const char* key, T&, std::int64_t, bool) {
    add(key);
  }
  void section(const char* key, const std::function<void()>& body) {
    add(key);
    const auto saved = prefix_;
    prefix_ += std::string(key) + ".";
    body();
    prefix_ = saved;
  }

 private:
  void add(const char* key) { keys.push_back(prefix_ + key); }
  std::string prefix_;
};

const std::vector<std::string>& all_keys() {
  static const std::vector<std::string> keys = [] {
    KeyCollector collector;
    const RunConfig defaults;
    describe_run(collector, defaults);
    return collector.keys;
  }();
  return keys;
}

// ---- reading -----------------------------------------------------------------------------------

class Reader {
 public:
  Reader(const YAML::Node& root, std::string source, const std::vector<Override>& overrides)
      : source_(std::move(source)), overrides_(overrides) {
    frames_.push_back(Frame{root, ""});
  }

  template <class T>
  void integer(const char* key, T& out, const IntRange& range) {
    const auto node = value(key);
    if (!node) return;
    const auto scalar = plain_scalar(*node);
    const auto parsed = scalar ? parse_int(*scalar) : std::nullopt;
    IntRange allowed = range;
    allowed.min = std::max<std::int64_t>(allowed.min, std::numeric_limits<T>::min());
    if (static_cast<std::uint64_t>(std::numeric_limits<T>::max()) <
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      allowed.max = std::min<std::int64_t>(allowed.max, std::numeric_limits<T>::max());
    }
    const std::int64_t v = parsed.value_or(0);
    if (!parsed || v < allowed.min || v > allowed.max) {
      // The type's own limits are named only when they are what the value broke.
      const bool type_limit = parsed && v >= range.min && v <= range.max;
      fail(*node, key, "expected " + describe(type_limit ? allowed : range) + ", found " + found(*node));
    }
    out = static_cast<T>(v);
  }

  void number(const char* key, double& out, const Range& range) {
    const auto node = value(key);
    if (!node) return;
    const auto scalar = plain_scalar(*node);
    const auto parsed = scalar ? parse_double(*scalar) : std::nullopt;
    if (!parsed || !in_range(*parsed, range)) {
      fail(*node, key, "expected " + describe(range) + ", found " + found(*node));
    }
    out = *parsed;
  }

  void boolean(const char* key, bool& out) {
    const auto node = value(key);
    if (!node) return;
    const auto scalar = plain_scalar(*node);
    const auto parsed = scalar ? parse_bool(*scalar) : std::nullopt;
    if (!parsed) fail(*node, key, "expected true or false, found " + found(*node));
    out = *parsed;
  }

  void choice(const char* key, std::string& out, const std::vector<std::string>& allowed) {
    const auto node = value(key);
    if (!node) return;
    const std::string text = node->IsScalar() ? node->Scalar() : "";
    if (!node->IsScalar() || std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
      std::string message = "expected one of " + join(allowed) + "; found " + found(*node);
      const auto suggestion = closest(text, allowed);
      if (node->IsScalar() && !suggestion.empty()) message += "; did you mean " + suggestion + "?";
      fail(*node, key, message);
    }
    out = text;
  }

  void text(const char* key, std::string& out, Text rule) {
    const auto node = value(key);
    if (!node) return;
    if (!node->IsScalar() && !node->IsNull()) fail(*node, key, "expected a string, found " + found(*node));
    const std::string text = node->IsScalar() ? node->Scalar() : "";
    if (rule != Text::Any && text.empty()) fail(*node, key, "expected a non-empty string, found nothing");
    if (rule == Text::Name && text.find('/') != std::string::npos) {
      fail(*node, key, "expected a name without '/' (it names the run folder), found " + found(*node));
    }
    out = text;
  }

  template <class T>
  void int_list(const char* key, std::vector<T>& out, std::int64_t min, bool allow_empty) {
    const auto node = value(key);
    if (!node) return;
    const std::string expected = std::string("expected a sequence of ") +
                                 (allow_empty ? "" : "one or more ") + "integers >= " + std::to_string(min) +
                                 ", e.g. [3, 32, 32]; found ";
    if (!node->IsSequence() || (!allow_empty && node->size() == 0)) fail(*node, key, expected + found(*node));
    std::vector<T> values;
    for (const auto& item : *node) {
      const auto scalar = plain_scalar(item);
      const auto parsed = scalar ? parse_int(*scalar) : std::nullopt;
      if (!parsed || *parsed < min || *parsed > std::numeric_limits<T>::max()) {
        fail(item, key, expected + found(item) + " in the sequence");
      }
      values.push_back(static_cast<T>(*parsed));
    }
    out = std::move(values);
  }

  void section(const char* key, const std::function<void()>& body) {
    const auto node = value(key);
    YAML::Node section_node;
    if (node) {
      if (!node->IsMap() && !node->IsNull()) {
        fail(*node, key, "expected a section of indented key: value lines, found " + found(*node));
      }
      section_node = *node;
    }
    frames_.push_back(Frame{section_node, path(key)});
    body();
    reject_unknown_keys();
    frames_.pop_back();
  }

  // Checks the root's own keys; sections check theirs when they close.
  void finish() {
    const YAML::Node& root = frames_.back().node;
    if (root.IsDefined() && !root.IsNull() && !root.IsMap()) {
      throw ConfigError(yaml_location(source_, root), "",
                        "expected a mapping of keys (name, out_dir, nproc, data, model, optim, parallel, "
                        "train) at the top of the document, found " +
                            found(root));
    }
    reject_unknown_keys();
  }

 private:
  struct Frame {
    YAML::Node node;  // null when the section is absent
    std::string path;
    std::set<std::string> known{};
  };

  std::string path(const char* key) const {
    const auto& prefix = frames_.back().path;
    return prefix.empty() ? std::string(key) : prefix + "." + key;
  }

  // The value under `key` in the current section, or nullopt when absent (the default stays).
  std::optional<YAML::Node> value(const char* key) {
    Frame& frame = frames_.back();
    frame.known.insert(key);
    if (!frame.node.IsDefined() || !frame.node.IsMap()) return std::nullopt;
    const YAML::Node& section = frame.node;
    const YAML::Node child = section[key];
    if (!child.IsDefined()) return std::nullopt;
    return child;
  }

  // Where a key's value came from: the last override that set it or a section above it, else
  // the file and line of the node.
  std::string where(const std::string& key, const YAML::Node& node) const {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      const auto& k = it->key;
      const bool covers = key == k || key.rfind(k + ".", 0) == 0 || k.rfind(key + ".", 0) == 0;
      if (covers) return "override \"" + it->text + "\"";
    }
    return yaml_location(source_, node);
  }

  [[noreturn]] void fail(const YAML::Node& node, const char* key, const std::string& problem) const {
    const auto full = path(key);
    throw ConfigError(where(full, node), full, full + ": " + problem);
  }

  void reject_unknown_keys() const {
    const Frame& frame = frames_.back();
    if (!frame.node.IsDefined() || !frame.node.IsMap()) return;
    std::set<std::string> seen;
    for (const auto& entry : frame.node) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
      const std::string full = frame.path.empty() ? key : frame.path + "." + key;
      if (!seen.insert(key).second) {
        throw ConfigError(where(full, entry.first), full,
                          "duplicate key " + full + "; keep one of the two entries");
      }
      if (frame.known.count(key)) continue;
      const std::vector<std::string> siblings(frame.known.begin(), frame.known.end());
      std::string message = "unknown key " + full;
      auto suggestion = closest(key, siblings);
      if (!suggestion.empty()) {
        suggestion = frame.path.empty() ? suggestion : frame.path + "." + suggestion;
      } else {
        // The right key in the wrong section, e.g. data.lr for optim.lr.
        for (const auto& candidate : all_keys()) {
          const auto dot = candidate.rfind('.');
          if (candidate.substr(dot == std::string::npos ? 0 : dot + 1) == key) suggestion = candidate;
        }
      }
      if (!suggestion.empty()) {
        message += "; did you mean " + suggestion + "?";
      } else {
        message += "; allowed keys" + (frame.path.empty() ? std::string() : " in " + frame.path) + ": " +
                   join(siblings);
      }
      throw ConfigError(where(full, entry.first), full, message);
    }
  }

  std::string source_;
  const std::vector<Override>& overrides_;
  std::vector<Frame> frames_;
};

// ---- writing -----------------------------------------------------------------------------------

class YamlWriter {
 public:
  YAML::Node root{YAML::NodeType::Map};

  YamlWriter() { stack_.push_back(root); }

  template <class T, class R>
  void integer(const char* key, const T& value, const R&) {
    set(key, YAML::Node(value));
  }
  template <class R>
  void number(const char* key, const double& value, const R&) {
    set(key, YAML::Node(format_double(value)));
  }
  void boolean(const char* key, const bool& value) { set(key, YAML::Node(value)); }
  void choice(const char* key, const std::string& value, const std::vector<std::string>&) {
    set(key, YAML::Node(value));
  }
  void text(const char* key, const std::string& value, Text) { set(key, YAML::Node(value)); }
  template <class T>
  void int_list(const char* key, const std::vector<T>& values, std::int64_t, bool) {
    YAML::Node list(YAML::NodeType::Sequence);
    for (const auto v : values) list.push_back(v);
    list.SetStyle(YAML::EmitterStyle::Flow);
    set(key, list);
  }
  void section(const char* key, const std::function<void()>& body) {
    YAML::Node child(YAML::NodeType::Map);
    set(key, child);
    stack_.push_back(child);
    body();
    stack_.pop_back();
  }

 private:
  void set(const char* key, const YAML::Node& value) { stack_.back()[key] = value; }
  std::vector<YAML::Node> stack_;
};

class JsonWriter {
 public:
  nlohmann::json root = nlohmann::json::object();

  JsonWriter() { stack_.push_back(&root); }

  template <class T, class R>
  void integer(const char* key, const T& value, const R&) {
    (*stack_.back())[key] = value;
  }
  template <class R>
  void number(const char* key, const double& value, const R&) {
    (*stack_.back())[key] = value;
  }
  void boolean(const char* key, const bool& value) { (*stack_.back())[key] = value; }
  void choice(const char* key, const std::string& value, const std::vector<std::string>&) {
    (*stack_.back())[key] = value;
  }
  void text(const char* key, const std::string& value, Text) { (*stack_.back())[key] = value; }
  template <class T>
  void int_list(const char* key, const std::vector<T>& values, std::int64_t, bool) {
    (*stack_.back())[key] = values;
  }
  void section(const char* key, const std::function<void()>& body) {
    nlohmann::json& child = (*stack_.back())[key] = nlohmann::json::object();
    stack_.push_back(&child);
    body();
    stack_.pop_back();
  }

 private:
  std::vector<nlohmann::json*> stack_;
};

// ---- comparing ---------------------------------------------------------------------------------

using FieldPtr =
    std::variant<const int*, const std::int64_t*, const std::uint64_t*, const double*, const bool*,
                 const std::string*, const std::vector<int>*, const std::vector<std::int64_t>*>;

class FieldCollector {
 public:
  std::vector<FieldPtr> fields;

  template <class T, class R>
  void integer(const char*, const T& value, const R&) {
    fields.emplace_back(&value);
  }
  template <class R>
  void number(const char*, const double& value, const R&) {
    fields.emplace_back(&value);
  }
  void boolean(const char*, const bool& value) { fields.emplace_back(&value); }
  void choice(const char*, const std::string& value, const std::vector<std::string>&) {
    fields.emplace_back(&value);
  }
  void text(const char*, const std::string& value, Text) { fields.emplace_back(&value); }
  template <class T>
  void int_list(const char*, const std::vector<T>& values, std::int64_t, bool) {
    fields.emplace_back(&values);
  }
  void section(const char*, const std::function<void()>& body) { body(); }
};

}  // namespace

RunConfig run_config_from_yaml(const YAML::Node& root, const std::string& source,
                               const std::vector<Override>& applied_overrides) {
  RunConfig config;
  Reader reader(root, source, applied_overrides);
  describe_run(reader, config);
  reader.finish();
  return config;
}

RunConfig parse_run_config(const std::string& yaml_text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  YAML::Node root = parse_yaml(yaml_text, source);
  const auto parsed = parse_overrides(overrides);
  apply_overrides(root, parsed);
  return run_config_from_yaml(root, source, parsed);
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root = load_yaml_file(path);
  const auto parsed = parse_overrides(overrides);
  apply_overrides(root, parsed);
  return run_config_from_yaml(root, path, parsed);
}

YAML::Node to_yaml_node(const RunConfig& config) {
  YamlWriter writer;
  describe_run(writer, config);
  return writer.root;
}

std::string to_yaml(const RunConfig& config) {
  YAML::Emitter out;
  out << to_yaml_node(config);
  return std::string(out.c_str()) + "\n";
}

nlohmann::json to_json(const RunConfig& config) {
  JsonWriter writer;
  describe_run(writer, config);
  return writer.root;
}

bool operator==(const RunConfig& a, const RunConfig& b) {
  FieldCollector fa, fb;
  describe_run(fa, a);
  describe_run(fb, b);
  TORCH_INTERNAL_ASSERT(fa.fields.size() == fb.fields.size());
  for (std::size_t i = 0; i < fa.fields.size(); ++i) {
    const bool same = std::visit(
        [&](auto pa) {
          using P = decltype(pa);
          return *pa == *std::get<P>(fb.fields[i]);
        },
        fa.fields[i]);
    if (!same) return false;
  }
  return true;
}

}  // namespace dtrain::config
