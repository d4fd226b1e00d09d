// One attempt of the job: every worker of this node started (or one mpirun for all ranks), then
// watched until all have exited. A restart is another attempt with the next number.
#pragma once

#include "dtrain/launch/Job.h"

namespace dtrain::launch {

AttemptOutcome run_attempt(Job& job, int attempt);

}  // namespace dtrain::launch
