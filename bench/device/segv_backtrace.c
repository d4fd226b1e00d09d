/* A crash reporter to preload into a program on the GPU machine, which has no debugger: on SIGSEGV,
 * SIGBUS, SIGILL or SIGABRT it writes the signal, the faulting address and the call stack (each frame
 * as library(symbol+offset)) to stderr, then dies of the same signal. Not part of the product: it finds
 * where the LibTorch 2.x builds crash (bench/device/fs-probe.sh).
 *   cc -shared -fPIC -O1 -o segv_backtrace.so segv_backtrace.c
 *   LD_PRELOAD=$PWD/segv_backtrace.so ./program */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char alt_stack[1 << 16];

static void report(int sig, siginfo_t* info, void* context) {
  (void)context;
  char line[160];
  int n = snprintf(line, sizeof line, "\n=== segv_backtrace: signal %d at address %p; stack:\n", sig,
                   info ? info->si_addr : NULL);
  if (n > 0) (void)!write(2, line, (size_t)n);
  void* frames[64];
  int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = report;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  int signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGABRT};
  for (unsigned i = 0; i < sizeof signals / sizeof signals[0]; ++i) sigaction(signals[i], &sa, NULL);
}
