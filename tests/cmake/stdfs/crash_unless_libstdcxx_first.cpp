// Crashes, as dtrain's programs did against pip's torch 2.11, unless libstdc++ is loaded before
// libtorch_cpu (the order in which the dynamic linker looks symbols up), then does the real check.
#include <link.h>

#include <cstring>

namespace {
int first_of_the_two(dl_phdr_info* info, size_t, void* data) {
  int& first = *static_cast<int*>(data);
  if (first == 0 && std::strstr(info->dlpi_name, "libtorch_cpu")) first = 1;
  if (first == 0 && std::strstr(info->dlpi_name, "libstdc++")) first = 2;
  return 0;
}
}  // namespace

#define main checked_main
#include "../../../cmake/StdFilesystemCheck.cpp"
#undef main

int main() {
  int first = 0;
  dl_iterate_phdr(first_of_the_two, &first);
  if (first != 2) {
    volatile int* nowhere = nullptr;
    return *nowhere;
  }
  return checked_main();
}
