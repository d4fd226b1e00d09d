// Meeting the other ranks through a c10d TCPStore, shared by the gloo and nccl backends: who hosts
// the store, the key namespace of one connect(), and a join step that names the ranks that never came.
#pragma once

#include <string>

#include "dtrain/comm/C10dCompat.h"
#include "dtrain/comm/rendezvous/Rendezvous.h"

namespace dtrain::comm {

// Opens the store (rank 0 hosts it unless an agent does), applies store_prefix, and waits until
// every rank of the world has joined. The returned store is private to this connect(): a process
// may connect several times to the same store (one run after another) without key clashes.
// Throws CommError("rendezvous") naming the missing ranks when they do not join within
// rendezvous.timeout.
compat::StorePtr join_store(const RendezvousInfo& rendezvous, const std::string& backend);

}  // namespace dtrain::comm
