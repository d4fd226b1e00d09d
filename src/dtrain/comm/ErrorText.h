// The message of an exception from LibTorch, without the C++ backtrace that c10::Error::what()
// carries and that says nothing to a user.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace dtrain::comm {

inline std::string error_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace dtrain::comm
