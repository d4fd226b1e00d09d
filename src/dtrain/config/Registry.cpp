// The registries behind config::registered_choices and config::register_section: function-local
// statics, so registering from other files' static initialisers is safe whatever their order.
#include "dtrain/config/Registry.h"

#include <map>
#include <mutex>

namespace dtrain::config {
namespace {

struct Registries {
  std::mutex mutex;
  std::map<std::string, ChoiceSet> choices;
  std::map<std::string, std::vector<std::pair<std::string, SectionFactory>>> sections;
};

Registries& registries() {
  static Registries r;
  return r;
}

}  // namespace

ChoiceSet& registered_choices(std::string_view key) {
  auto& r = registries();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.choices[std::string(key)];
}

bool register_choice(const std::string& key, Choice choice) {
  registered_choices(key).add(std::move(choice));
  return true;
}

bool register_section(const std::string& parent, const std::string& name, SectionFactory make) {
  auto& r = registries();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& list = r.sections[parent];
  for (const auto& entry : list) {
    if (entry.first == name)
      throw std::logic_error("options section " + parent + "." + name + " registered twice");
  }
  list.emplace_back(name, std::move(make));
  return true;
}

std::vector<std::pair<std::string, SectionFactory>> registered_sections(const std::string& parent) {
  auto& r = registries();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.sections.find(parent);
  return it == r.sections.end() ? std::vector<std::pair<std::string, SectionFactory>>{} : it->second;
}

}  // namespace dtrain::config
