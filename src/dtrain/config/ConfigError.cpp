// ConfigError: the message layout shared by every configuration error.
#include "dtrain/config/ConfigError.h"

#include <utility>

namespace dtrain::config {

ConfigError::ConfigError(std::string where, std::string key, std::string message)
    : std::runtime_error(where.empty() ? message : where + ": " + message),
      where_(std::move(where)),
      key_(std::move(key)),
      message_(std::move(message)) {}

}  // namespace dtrain::config
