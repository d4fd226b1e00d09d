// The error every malformed configuration raises: where (file:line, or the command-line
// override), which key, and what is allowed, so a user can fix the file without reading code.
#pragma once

#include <stdexcept>
#include <string>

namespace dtrain::config {

class ConfigError : public std::runtime_error {
 public:
  // what() reads "<where>: <message>", e.g.
  // `configs/x.yaml:12: optim.lr: expected a positive number, found "fast"`; the message names the key.
  ConfigError(std::string where, std::string key, std::string message);

  // "configs/x.yaml:12" or `override "optim.lr=fast"`.
  const std::string& where() const { return where_; }
  // The dotted key, e.g. "optim.lr"; empty for errors about the whole document.
  const std::string& key() const { return key_; }
  const std::string& message() const { return message_; }

 private:
  std::string where_;
  std::string key_;
  std::string message_;
};

}  // namespace dtrain::config
