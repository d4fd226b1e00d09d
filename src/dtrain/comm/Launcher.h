// Transitional (issue 10): the launcher moved to launch/ (dtrain::launch), and nothing in comm/
// includes this header. It only keeps experiment/ building until Experiment.cpp includes
// "dtrain/launch/Launcher.h" and calls launch::launch(); then delete it, and the link of
// dtrain_experiment to dtrain_launch in src/dtrain/CMakeLists.txt.
#pragma once

#include "dtrain/launch/Launcher.h"

namespace dtrain::comm {

using launch::launch;
using launch::LaunchOptions;
using launch::LaunchResult;

}  // namespace dtrain::comm
