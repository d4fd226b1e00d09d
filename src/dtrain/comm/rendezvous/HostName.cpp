// getaddrinfo on the rendezvous host; see HostName.h.
#include "dtrain/comm/rendezvous/HostName.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <thread>

namespace dtrain::comm {

std::string unresolvable_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int status = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    addrinfo* found = nullptr;
    status = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (found != nullptr) ::freeaddrinfo(found);
    if (status != EAI_AGAIN) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return status == 0 ? "" : ::gai_strerror(status);
}

}  // namespace dtrain::comm
