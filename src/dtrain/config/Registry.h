// Where the layers above config/ register what a configuration may name: the models, optimizers,
// schedules, losses, data sets and strategies (config::registered_choices("model.name")), and the
// option sections of strategies (parallel.<strategy>.*). Each list is written once, beside the
// factory that builds its entries, and config/ validates against it, so no list of names is kept
// in two places.
//
// Registration happens while the program starts (static initialisers). A registering file must
// be linked into every program that parses configurations, though nothing calls into it by name:
// its layer tells the linker to keep it (see Note [Link anchors]).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/config/Options.h"

namespace dtrain::config {

// The set behind a choice key ("model.name", "optim.name", "optim.scheduler.name", "optim.loss",
// "data.dataset", "parallel.strategy"); empty until its layer registers.
ChoiceSet& registered_choices(std::string_view key);
// Adds `choice` under `key`; returns true, for use as a static initialiser.
bool register_choice(const std::string& key, Choice choice);

using SectionFactory = std::function<std::unique_ptr<OptionSection>()>;
// Registers section `name` under `parent` ("parallel"), whose defaults `make` builds.
bool register_section(const std::string& parent, const std::string& name, SectionFactory make);
std::vector<std::pair<std::string, SectionFactory>> registered_sections(const std::string& parent);

template <class T>
bool register_section(const std::string& parent, const std::string& name, T defaults,
                      typename TypedSection<T>::Describe describe) {
  return register_section(
      parent, name, [defaults, describe] { return std::make_unique<TypedSection<T>>(defaults, describe); });
}

// Note [Link anchors]
// A static library's object file is linked only when something refers to one of its symbols, so
// a file that only registers would be dropped. Each registering file defines an anchor with
// DTRAIN_LINK_ANCHOR(name), and its layer's CMakeLists passes `--undefined=name` to the linker of
// every program that links the layer (dtrain_layer(... ANCHORS name)), which keeps the file in.
#define DTRAIN_LINK_ANCHOR(name) \
  extern "C" const bool name;    \
  extern "C" const bool name = true

}  // namespace dtrain::config
