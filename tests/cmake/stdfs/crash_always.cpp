// Crashes in its second step whatever the link, as a LibTorch no link can help would.
#include <cstdio>

#include <ATen/Parallel.h>

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  std::printf("check: LibTorch with %d threads\n", at::get_num_threads());
  std::puts("check: temp_directory_path");
  volatile int* nowhere = nullptr;
  return *nowhere;
}
