// Crash-safe file replacement: write a temporary file in the target's directory, fsync it, rename
// it over the target, fsync the directory. A reader sees the old file or the new one, never a torn
// one, even after a power cut; temporary files left by a crash are recognisable and ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::io {

// A unique temporary path beside `target`: ".<name>.tmp.<pid>.<n>".
std::filesystem::path temporary_path_for(const std::filesystem::path& target);

// True for names made by temporary_path_for (left behind by a crash mid-write).
bool is_temporary_file(const std::filesystem::path& path);

// Atomically replaces `target` with `bytes`. Throws std::runtime_error naming the path and the
// system error.
void write_file_atomic(const std::filesystem::path& target, std::string_view bytes);

// Atomically replaces `target` with a file that `write` creates at the temporary path it is given
// (for writers that insist on a file name, like torch's archives). The temporary file is removed
// if `write` throws.
void replace_file_atomic(const std::filesystem::path& target,
                         const std::function<void(const std::filesystem::path& temporary)>& write);

// Receives a file's bytes in pieces, in order.
using ByteSink = std::function<void(const void* data, std::size_t size)>;

struct WrittenFile {
  std::uint64_t bytes = 0;
  std::uint32_t crc32c = 0;  // of the whole file, as io/Crc32c.h computes it
};

// Atomically replaces `target` with the bytes `produce` hands to its sink, streamed to the
// temporary file as they come. See Note [Failed writes].
WrittenFile stream_file_atomic(const std::filesystem::path& target,
                               const std::function<void(const ByteSink& sink)>& produce);

// Removes the temporary files in `dir` (not below it) whose writer has exited: left by a process
// killed mid-write. A writer that still runs (its pid is alive) keeps its file. Returns the paths
// removed.
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& dir);

// fsync of a file or directory by path.
void fsync_path(const std::filesystem::path& path);

}  // namespace dtrain::io
