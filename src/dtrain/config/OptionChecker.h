// Options set in code, checked where they stand by the rules their description gives: the ranges,
// closed sets, text rules and lists the YAML reader checks a file's values by, with the reader's
// messages, and no YAML in between. A library caller's option structs (parallel/Strategies.h) pass
// the checks a configuration file's pass.
#pragma once

#include <string>
#include <vector>

#include "dtrain/config/Options.h"

namespace dtrain::config {

// Visits a struct's options and throws ConfigError for the first that its description refuses:
// key() is the dotted key (parallel.zero.stage), message() "<key>: expected ..., found ..." as the
// reader words it, where() the `where` given. A name of a closed set is put in its canonical
// spelling ("MNISTNet" -> "mnistnet"), as reading it would; nothing else is changed. A section
// that does not apply (`unused`) is not visited: a writer leaves it out, so no reader checks it.
class OptionChecker final : public OptionVisitor {
 public:
  // `prefix`: the dotted key of the struct visited ("parallel"), "" for a whole RunConfig.
  OptionChecker(std::string prefix, std::string where);

  void integer(const char* key, int& value, IntRange range, const char*) override;
  void integer(const char* key, std::int64_t& value, IntRange range, const char*) override;
  void integer(const char* key, std::uint64_t& value, IntRange range, const char*) override;
  void number(const char* key, double& value, Range range, const char*) override;
  void boolean(const char*, bool&, const char*) override {}
  void choice(const char* key, std::string& value, const ChoiceSet& allowed, const char*) override;
  void enum_choice(const char* key, const EnumField& value, const char*) override;
  void text(const char* key, std::string& value, Text rule, const char*) override;
  void int_list(const char* key, std::vector<int>& value, std::int64_t min, bool allow_empty,
                const char*) override;
  void int_list(const char* key, std::vector<std::int64_t>& value, std::int64_t min, bool allow_empty,
                const char*) override;
  void text_list(const char* key, std::vector<std::string>& value, const char*) override;
  void section(const char* key, const std::function<void()>& body, const char* unused) override;

 private:
  template <class T>
  void check_integer(const char* key, T value, const IntRange& range);
  template <class T>
  void check_int_list(const char* key, const std::vector<T>& values, std::int64_t min, bool allow_empty);
  std::string path(const char* key) const;
  [[noreturn]] void fail(const char* key, const std::string& problem) const;

  std::string where_;
  std::vector<std::string> prefixes_;  // the dotted key of each open section, outermost first
};

}  // namespace dtrain::config
