// Fuzz target: a run configuration file and command-line overrides. The input is the YAML file,
// optionally followed by a line "# --set" and one "key=value" override per line. Whatever loads
// must survive its own serialisation: to_yaml, loaded back, gives an equal RunConfig.
#include <string>
#include <vector>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/RunConfigYaml.h"
#include "fuzz/FuzzInput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain;
  const std::string input(fuzz::as_text(data, size));
  std::string yaml = input;
  std::vector<std::string> overrides;
  const std::string marker = "# --set\n";
  if (const auto at = input.find(marker); at != std::string::npos) {
    yaml = input.substr(0, at);
    std::string rest = input.substr(at + marker.size());
    for (std::size_t start = 0; start <= rest.size();) {
      const auto end = std::min(rest.find('\n', start), rest.size());
      if (end > start) overrides.push_back(rest.substr(start, end - start));
      start = end + 1;
    }
  }
  const std::string path = fuzz::write_scratch("config.yaml", yaml);
  config::RunConfig loaded;
  try {
    loaded = config::load_run_config(path, overrides);
  } catch (const config::ConfigError&) {
    return 0;  // the documented refusal, naming file:line or the override
  }
  const std::string written = config::to_yaml(loaded);
  config::RunConfig again;
  try {
    again = config::parse_run_config(written, "<to_yaml>");
  } catch (const config::ConfigError& e) {
    fuzz::property_failed(std::string("to_yaml of a loaded config does not load: ") + e.what() + "\n" +
                          written);
  }
  if (again != loaded) fuzz::property_failed("to_yaml then load gives a different config:\n" + written);
  return 0;
}
