// Resolving the rendezvous host before connecting to it: a misspelt MASTER_ADDR gets one line that
// names the host, instead of a socket timeout among c10d's per-second glog warnings.
#pragma once

#include <string>

namespace dtrain::comm {

// Why `host` (a name or a numeric address) cannot be resolved to a TCP address, in getaddrinfo's
// words ("Name or service not known"), or "" when it can. A temporary failure (EAI_AGAIN) is
// retried for a few seconds, as a cluster's DNS may lag behind the job's start.
std::string unresolvable_host(const std::string& host);

}  // namespace dtrain::comm
