#include "dtrain/run/SelfExe.h"

#include <filesystem>
#include <stdexcept>

namespace dtrain::run {

std::string self_executable() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error)
    throw std::runtime_error("cannot find this program's path through /proc/self/exe: " + error.message());
  return path.string();
}

}  // namespace dtrain::run
