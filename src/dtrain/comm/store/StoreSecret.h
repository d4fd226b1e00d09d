// The rendezvous store's shared secret (Note [Store handshake]) is read from a file, never taken
// from a command line or an environment variable's value, so that it shows in no `ps` listing and
// no worker environment: those carry only the file's path (--secret-file, DTRAIN_SECRET_FILE).
#pragma once

#include <string>

namespace dtrain::comm {

// The variable that names the secret file for workers and for `dtrain launch`.
inline constexpr const char* kSecretFileVariable = "DTRAIN_SECRET_FILE";

// The secret in `path` (one trailing newline dropped, so `echo ... > FILE` works). Throws
// std::invalid_argument naming `origin` (the flag or variable that gave the path) and the file when
// it cannot be read, is empty or longer than 4 KiB, or can be read by other users than its owner
// (as ssh refuses such a key: chmod 600 it).
std::string read_secret_file(const std::string& path, const std::string& origin);

}  // namespace dtrain::comm
