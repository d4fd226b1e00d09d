// Console::standard_error: the mode comes from whether stderr is a terminal and from what the
// caller passes in, never from the environment (io reads no environment variable).
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include "dtrain/io/Console.h"

namespace dtrain::io {
namespace {

TEST(Console, StandardErrorRelaysOnlyWhenTheCallerSaysSo) {
  if (::isatty(STDERR_FILENO) == 1)
    GTEST_SKIP() << "stderr is a terminal: the console draws the status itself";
  EXPECT_TRUE(Console::standard_error(/*relay_status=*/true)->is_terminal());    // Relay
  EXPECT_FALSE(Console::standard_error(/*relay_status=*/false)->is_terminal());  // Plain
  // The launcher's variable in the environment changes nothing: cli/ reads it, not io.
  ::setenv("DTRAIN_STATUS_RELAY", "1", 1);
  const bool relayed = Console::standard_error(/*relay_status=*/false)->is_terminal();
  ::unsetenv("DTRAIN_STATUS_RELAY");
  EXPECT_FALSE(relayed);
}

}  // namespace
}  // namespace dtrain::io
