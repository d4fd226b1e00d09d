// See ExitCodes.h.
#include "dtrain/run/ExitCodes.h"

#include <c10/util/Exception.h>

#include "dtrain/comm/Work.h"
#include "dtrain/config/ConfigError.h"

namespace dtrain::run {

std::string error_message(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e))
    return torch_error->what_without_backtrace();
  return e.what();
}

int exit_code_for(const std::exception& e) {
  if (dynamic_cast<const config::ConfigError*>(&e) || dynamic_cast<const std::invalid_argument*>(&e)) {
    return kExitUsage;
  }
  return kExitFailure;
}

void rethrow_as_usage_error(const std::exception& e) {
  if (dynamic_cast<const comm::CommError*>(&e) || exit_code_for(e) == kExitUsage) throw;
  throw UsageError(error_message(e));
}

}  // namespace dtrain::run
