// The process environment, read once, for the layers below that must not call getenv themselves.
#pragma once

#include "dtrain/comm/rendezvous/Rendezvous.h"

namespace dtrain::config {

// A copy of this process's environment variables.
comm::Environment process_environment();

}  // namespace dtrain::config
