// The path of the running dtrain binary, for commands that start their own workers.
#pragma once

#include <string>

namespace dtrain::run {

// /proc/self/exe resolved to the binary's real path (the link itself would name whatever program
// reads it, e.g. mpirun's daemon); throws std::runtime_error when it cannot be read.
std::string self_executable();

}  // namespace dtrain::run
