#include "dtrain/config/Environment.h"

#include <unistd.h>

extern char** environ;

namespace dtrain::config {

comm::Environment process_environment() {
  comm::Environment env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string kv(*entry);
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace dtrain::config
