// ChoiceSet matching and the copyable set of registered option sections.
#include "dtrain/config/Options.h"

#include <algorithm>
#include <cctype>

#include "dtrain/config/Registry.h"

namespace dtrain::config {
namespace {

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

ChoiceSet::ChoiceSet(std::initializer_list<const char*> names) {
  for (const char* name : names) add(Choice{name, "", {}});
}

void ChoiceSet::add(Choice choice) {
  std::vector<std::string> spellings{choice.name};
  spellings.insert(spellings.end(), choice.aliases.begin(), choice.aliases.end());
  for (const auto& spelling : spellings) {
    if (resolve(spelling)) {
      throw std::logic_error("the name '" + spelling + "' is registered twice (adding '" + choice.name +
                             "')");
    }
  }
  choices_.push_back(std::move(choice));
}

std::vector<std::string> ChoiceSet::names() const {
  std::vector<std::string> out;
  for (const auto& c : choices_) out.push_back(c.name);
  return out;
}

std::optional<std::string> ChoiceSet::resolve(const std::string& text) const {
  const auto wanted = lowercase(text);
  for (const auto& c : choices_) {
    if (lowercase(c.name) == wanted) return c.name;
    for (const auto& alias : c.aliases) {
      if (lowercase(alias) == wanted) return c.name;
    }
  }
  return std::nullopt;
}

const Choice* ChoiceSet::find(const std::string& text) const {
  const auto name = resolve(text);
  for (const auto& c : choices_) {
    if (name && c.name == *name) return &c;
  }
  return nullptr;
}

std::string ChoiceSet::list() const {
  std::string out;
  for (const auto& c : choices_) out += (out.empty() ? "" : ", ") + c.name;
  return out;
}

SectionSet::SectionSet(std::string parent) : parent_(std::move(parent)) {
  for (const auto& [name, make] : registered_sections(parent_)) sections_.emplace(name, make());
}

SectionSet::SectionSet(const SectionSet& other) : parent_(other.parent_) {
  for (const auto& [name, section] : other.sections_) sections_.emplace(name, section->clone());
}

SectionSet& SectionSet::operator=(const SectionSet& other) {
  if (this != &other) *this = SectionSet(other);
  return *this;
}

SectionSet::~SectionSet() = default;

std::vector<std::string> SectionSet::names() const {
  std::vector<std::string> out;
  for (const auto& entry : sections_) out.push_back(entry.first);
  return out;
}

const OptionSection& SectionSet::at(const std::string& name) const {
  const auto it = sections_.find(name);
  if (it == sections_.end()) {
    throw std::logic_error("no options section " + parent_ + "." + name +
                           " is registered; is its layer linked in?");
  }
  return *it->second;
}

OptionSection& SectionSet::at(const std::string& name) {
  return const_cast<OptionSection&>(static_cast<const SectionSet&>(*this).at(name));
}

}  // namespace dtrain::config
