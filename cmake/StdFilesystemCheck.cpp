// What dtrain's programs do first with std::filesystem, in a program of its own linked against
// LibTorch: CMake runs it at configure time (Note [std::filesystem and the official LibTorch builds]
// in cmake/StdFilesystemLink.cmake), and bench/device/fs-probe.sh runs it built several ways. It
// prints each step before taking it, so that a crash shows where.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#ifdef DTRAIN_CHECK_WITH_TORCH
#include <ATen/Parallel.h>
#endif

int main() {
  namespace fs = std::filesystem;
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // a crash loses nothing printed before it
#ifdef DTRAIN_CHECK_WITH_TORCH
  // A reference into libtorch_cpu, so that no --as-needed linker drops it from the program.
  std::printf("check: LibTorch with %d threads\n", at::get_num_threads());
#endif
  std::puts("check: temp_directory_path");
  const fs::path tmp = fs::temp_directory_path();
  std::puts("check: path / name");
  const fs::path dir = tmp / ("dtrain_stdfs_check_" + std::to_string(sizeof(fs::path)));
  std::puts("check: create_directories");
  fs::create_directories(dir / "a" / "b");
  std::puts("check: recursive_directory_iterator");
  int folders = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) folders += entry.is_directory() ? 1 : 0;
  std::puts("check: file status");
  const fs::path file = dir / "a" / "f.txt";
  std::FILE* out = std::fopen(file.string().c_str(), "w");
  if (out == nullptr) return 1;
  std::fputs("1234", out);
  std::fclose(out);
  const bool sizes = fs::exists(file) && fs::is_regular_file(file) && fs::file_size(file) == 4;
  std::puts("check: rename");
  fs::rename(file, dir / "f.txt");
  const bool names = (dir / "f.txt").filename() == "f.txt" && (dir / "f.txt").extension() == ".txt" &&
                     (dir / "a" / ".." / "f.txt").lexically_normal() == dir / "f.txt";
  std::puts("check: remove_all");
  const std::uintmax_t removed = fs::remove_all(dir);
  std::printf("check: ok (%d folders, %ju removed)\n", folders, removed);
  return folders == 2 && removed == 4 && sizes && names ? 0 : 1;
}
