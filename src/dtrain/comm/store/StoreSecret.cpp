// Reading the store's secret file, with the checks that keep a secret secret.
#include "dtrain/comm/store/StoreSecret.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace dtrain::comm {

std::string read_secret_file(const std::string& path, const std::string& origin) {
  struct stat info {};
  if (path.empty() || ::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
    throw std::invalid_argument(
        fmt::format("{}: the secret file '{}' does not exist or is not a file", origin, path));
  }
  if ((info.st_mode & 077) != 0) {
    throw std::invalid_argument(
        fmt::format("{}: the secret file '{}' can be read by other users (mode {:03o}); run chmod 600 '{}'",
                    origin, path, info.st_mode & 0777, path));
  }
  if (info.st_size > 4096) {
    throw std::invalid_argument(fmt::format(
        "{}: the secret file '{}' holds {} bytes; a secret is at most 4096", origin, path, info.st_size));
  }
  std::ifstream in(path, std::ios::binary);
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    throw std::invalid_argument(fmt::format("{}: the secret file '{}' cannot be read", origin, path));
  }
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (secret.empty()) {
    throw std::invalid_argument(fmt::format(
        "{}: the secret file '{}' is empty; put a long random secret in it (e.g. openssl rand -hex 32)",
        origin, path));
  }
  return secret;
}

}  // namespace dtrain::comm
