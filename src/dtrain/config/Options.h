// The vocabulary options are described in: value ranges, closed sets of names, and OptionVisitor,
// the interface every reader and writer of options implements. A layer describes its options
// struct once, as a function `describe(OptionVisitor&, Options&)`; config/ reads it from YAML with
// line numbers in every error, writes it back, lists its keys and compares it, without knowing
// the struct. Strategies register such sections of their own (parallel.<strategy>.*).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/util/EnumNames.h"

namespace dtrain::config {

struct IntRange {
  std::int64_t min = std::numeric_limits<std::int64_t>::min();
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
};
inline IntRange at_least(std::int64_t min) {
  return {min, std::numeric_limits<std::int64_t>::max()};
}

struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;  // min itself excluded
  bool max_open = false;
};
inline constexpr Range kPositive{0.0, std::numeric_limits<double>::infinity(), true, false};
inline constexpr Range kNonNegative{0.0, std::numeric_limits<double>::infinity(), false, false};
inline constexpr Range kUnitOpen{0.0, 1.0, false, true};  // [0, 1)
inline constexpr Range kUnitClosed{0.0, 1.0, false, false};

// What a text option may hold: anything, something, or a name that can be a folder's name.
enum class Text { Any, NonEmpty, Name };

// One value of a closed set, with a line of help and other spellings it accepts.
struct Choice {
  Choice(std::string name, std::string help = "", std::vector<std::string> aliases = {},
         std::vector<std::string> sections = {})
      : name(std::move(name)),
        help(std::move(help)),
        aliases(std::move(aliases)),
        sections(std::move(sections)) {}
  std::string name;
  std::string help;
  std::vector<std::string> aliases;
  // The option sections beside the choice that apply when it is chosen (a strategy's
  // parallel.<section>.*); the others must be left out.
  std::vector<std::string> sections;
  // The keys beside the choice that only some choices read, and which this one reads (a built-in
  // model's: mlp reads model.hidden and model.activation); set, the others must be left out. Unset:
  // the choice may read any of them (a program's own model).
  std::optional<std::vector<std::string>> reads{};
};

// A closed set of names. Matching ignores case and accepts aliases, and a match stands for the
// canonical name ("MNISTNet" -> "mnistnet", "lenet" -> "lenet5").
class ChoiceSet {
 public:
  ChoiceSet() = default;
  ChoiceSet(std::initializer_list<const char*> names);

  // Throws std::logic_error when the name or an alias is taken already.
  void add(Choice choice);
  const std::vector<Choice>& choices() const { return choices_; }
  std::vector<std::string> names() const;
  bool empty() const { return choices_.empty(); }
  // The canonical name `text` stands for, or nothing.
  std::optional<std::string> resolve(const std::string& text) const;
  // The choice `text` stands for, or null.
  const Choice* find(const std::string& text) const;
  // "sgd, adam, adamw, lbfgs"
  std::string list() const;

 private:
  std::vector<Choice> choices_;
};

// An enum option seen through its names table (util/EnumNames.h): visitors read and write it by
// the spelling YAML gives it, and match it as the closed set of those names, so it reads, writes
// and fails exactly as a choice() over the same names would.
class EnumField {
 public:
  template <class Enum, std::size_t N>
  EnumField(Enum& value, const util::EnumNames<Enum, N>& names)
      : get_([&value, &names] { return names.name(value); }),
        set_([&value, &names](const std::string& name) { value = names.parse(name, "value"); }) {
    for (const auto& entry : names.entries) allowed_.add(Choice(entry.second));
  }
  // The value's name: "bf16".
  std::string name() const { return get_(); }
  // Sets the value named `name`, one of allowed()'s names exactly.
  void set(const std::string& name) const { set_(name); }
  const ChoiceSet& allowed() const { return allowed_; }

 private:
  std::function<std::string()> get_;
  std::function<void(const std::string&)> set_;
  ChoiceSet allowed_;
};

// Visits every option of a struct. Readers assign, writers read (they never modify), and key
// collectors and comparisons only look at the addresses. `help` is the option's line in
// `dtrain train --help`, which lists every key from this same description.
class OptionVisitor {
 public:
  virtual ~OptionVisitor() = default;
  virtual void integer(const char* key, int& value, IntRange range, const char* help = "") = 0;
  virtual void integer(const char* key, std::int64_t& value, IntRange range, const char* help = "") = 0;
  virtual void integer(const char* key, std::uint64_t& value, IntRange range, const char* help = "") = 0;
  virtual void number(const char* key, double& value, Range range, const char* help = "") = 0;
  virtual void boolean(const char* key, bool& value, const char* help = "") = 0;
  virtual void choice(const char* key, std::string& value, const ChoiceSet& allowed,
                      const char* help = "") = 0;
  // A closed set of names held as an enum; choice() below builds the field from its names table.
  virtual void enum_choice(const char* key, const EnumField& value, const char* help = "") = 0;
  template <class Enum, std::size_t N>
  void choice(const char* key, Enum& value, const util::EnumNames<Enum, N>& names, const char* help = "") {
    enum_choice(key, EnumField(value, names), help);
  }
  virtual void text(const char* key, std::string& value, Text rule, const char* help = "") = 0;
  virtual void int_list(const char* key, std::vector<int>& value, std::int64_t min, bool allow_empty,
                        const char* help = "") = 0;
  virtual void int_list(const char* key, std::vector<std::int64_t>& value, std::int64_t min, bool allow_empty,
                        const char* help = "") = 0;
  // A sequence of non-empty strings (model.freeze's name patterns); empty allowed.
  virtual void text_list(const char* key, std::vector<std::string>& value, const char* help = "") = 0;
  // A nested section. `unused` is null when the section applies to this configuration; otherwise
  // it says why not ("options of strategy data_parallel, but parallel.strategy is local"):
  // readers refuse the section with that reason when it is given, writers leave it out.
  virtual void section(const char* key, const std::function<void()>& body, const char* unused = nullptr) = 0;
  // Said after `key` of the current section was visited: the key does not apply to this
  // configuration, and `why` says why ("model lenet5 does not read it (mlp does); ..."). Readers
  // refuse it when it is given, writers leave it out; the other visitors take it as any key.
  virtual void inapplicable(const char* key, const char* why) {}
};

// One registered section's values, whatever their struct (see TypedSection).
class OptionSection {
 public:
  virtual ~OptionSection() = default;
  virtual void describe(OptionVisitor& visitor) = 0;
  virtual std::unique_ptr<OptionSection> clone() const = 0;
};

template <class T>
class TypedSection final : public OptionSection {
 public:
  using Describe = void (*)(OptionVisitor&, T&);
  TypedSection(T value, Describe describe) : value(std::move(value)), describe_(describe) {}
  void describe(OptionVisitor& visitor) override { describe_(visitor, value); }
  std::unique_ptr<OptionSection> clone() const override {
    return std::make_unique<TypedSection<T>>(value, describe_);
  }
  T value;

 private:
  Describe describe_;
};

// The sections registered under one parent key (parallel: one per strategy with options), each
// holding its defaults until a configuration sets them. Copies copy the values.
class SectionSet {
 public:
  // Every section registered under `parent` (see Registry.h), with its defaults.
  explicit SectionSet(std::string parent);
  SectionSet(const SectionSet& other);
  SectionSet& operator=(const SectionSet& other);
  SectionSet(SectionSet&&) noexcept = default;
  SectionSet& operator=(SectionSet&&) noexcept = default;
  ~SectionSet();

  bool contains(const std::string& name) const { return sections_.count(name) > 0; }
  std::vector<std::string> names() const;
  OptionSection& at(const std::string& name);
  const OptionSection& at(const std::string& name) const;

  // The values of section `name` as the struct it was registered with.
  template <class T>
  const T& get(const std::string& name) const {
    const auto* typed = dynamic_cast<const TypedSection<T>*>(&at(name));
    if (!typed)
      throw std::logic_error("options section " + parent_ + "." + name + " is not of the type asked for");
    return typed->value;
  }
  template <class T>
  T& get(const std::string& name) {
    return const_cast<T&>(static_cast<const SectionSet&>(*this).get<T>(name));
  }

 private:
  std::string parent_;
  std::map<std::string, std::unique_ptr<OptionSection>> sections_;
};

}  // namespace dtrain::config
