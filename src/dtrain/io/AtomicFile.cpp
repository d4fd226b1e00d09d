// Temporary file, fsync, rename, fsync of the directory: the POSIX recipe for atomic replacement.
#include "dtrain/io/AtomicFile.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dtrain::io {
namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path, int error) {
  throw std::runtime_error(what + " " + path.string() + ": " + std::strerror(error) +
                           "; check that the folder exists, is writable and the disk is not full");
}

// Closes the descriptor on every path out.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

std::filesystem::path directory_of(const std::filesystem::path& target) {
  const auto parent = target.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

}  // namespace

std::filesystem::path temporary_path_for(const std::filesystem::path& target) {
  static std::atomic<unsigned long> counter{0};
  return directory_of(target) / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()) +
                                 "." + std::to_string(counter++));
}

bool is_temporary_file(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name[0] == '.' && name.find(".tmp.") != std::string::npos;
}

void fsync_path(const std::filesystem::path& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open", path, errno);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail("cannot fsync", path, errno);
}

void replace_file_atomic(const std::filesystem::path& target,
                         const std::function<void(const std::filesystem::path& temporary)>& write) {
  const auto temporary = temporary_path_for(target);
  try {
    write(temporary);
    fsync_path(temporary);
    if (::rename(temporary.c_str(), target.c_str()) != 0)
      fail("cannot rename a temporary file onto", target, errno);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
  // The rename is durable only once the directory entry is.
  fsync_path(directory_of(target));
}

void write_file_atomic(const std::filesystem::path& target, std::string_view bytes) {
  replace_file_atomic(target, [&](const std::filesystem::path& temporary) {
    FileDescriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail("cannot create", temporary, errno);
    std::size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(fd.get(), bytes.data() + written, bytes.size() - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write", temporary, errno);
      }
      written += static_cast<std::size_t>(n);
    }
    if (::close(fd.release()) != 0) fail("cannot close", temporary, errno);
  });
}

}  // namespace dtrain::io
