// Temporary file, fsync, rename, fsync of the directory: the POSIX recipe for atomic replacement.
#include "dtrain/io/AtomicFile.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "dtrain/io/Crc32c.h"
#include "dtrain/io/FileDescriptor.h"

namespace dtrain::io {
namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path, int error) {
  throw std::runtime_error(what + " " + path.string() + ": " + std::strerror(error) +
                           "; check that the folder exists, is writable and the disk is not full");
}

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

// Note [Failed writes]
// A write that fails (ENOSPC on a full disk, EFBIG past RLIMIT_FSIZE, EIO) is remembered and the
// rest of the bytes are dropped; the failure is thrown once `produce` returns, naming the target
// and the system error, and replace_file_atomic removes the temporary file. Throwing from inside
// the sink would unwind through the producer: torch's archive writer is not written for that (its
// destructor writes the end of the archive again, through the same failing sink), and its own
// error text carries a C++ backtrace. A full disk thus costs one line and the previous file.
WrittenFile stream_file_atomic(const std::filesystem::path& target,
                               const std::function<void(const ByteSink& sink)>& produce) {
  WrittenFile written;
  replace_file_atomic(target, [&](const std::filesystem::path& temporary) {
    FileDescriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail("cannot create", temporary, errno);
    int error = 0;
    produce([&](const void* data, std::size_t size) {
      if (error != 0) return;
      const auto* bytes = static_cast<const char*>(data);
      for (std::size_t done = 0; done < size;) {
        const ssize_t n = ::write(fd.get(), bytes + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          error = n < 0 ? errno : EIO;
          return;
        }
        done += static_cast<std::size_t>(n);
      }
      written.bytes += size;
      written.crc32c = crc32c(data, size, written.crc32c);
    });
    if (error != 0) fail("cannot write", target, error);
    if (::close(fd.release()) != 0) fail("cannot write", target, errno);
  });
  return written;
}

std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> removed;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const auto& path = entry.path();
    if (!is_temporary_file(path)) continue;
    // ".<name>.tmp.<pid>.<n>": a live writer keeps its file (it renames or removes it itself).
    const std::string name = path.filename().string();
    const auto at = name.rfind(".tmp.");
    const auto pid_text = name.substr(at + 5, name.find('.', at + 5) - (at + 5));
    if (pid_text.empty() || pid_text.size() > 9 ||
        pid_text.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const long pid = std::stol(pid_text);
    if (pid == ::getpid() || (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    std::error_code ignored;
    if (std::filesystem::remove(path, ignored)) removed.push_back(path);
  }
  return removed;
}

void write_file_atomic(const std::filesystem::path& target, std::string_view bytes) {
  stream_file_atomic(target, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

}  // namespace dtrain::io
