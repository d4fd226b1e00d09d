// The hosts of a job over SSH (`dtrain launch --hostfile FILE` or `-H host1:2,host2:2`): DeepSpeed's
// hostfile, one `HOST slots=N` a line, and Horovod's -H list, read into hosts and their ranks.
#pragma once

#include <string>
#include <vector>

namespace dtrain::launch {

struct Host {
  std::string name;    // as ssh is given it: a name from ~/.ssh/config, a host name or an address
  int slots = 1;       // ranks it runs
  std::string origin;  // where it was read, for messages: "hosts.txt:3" or "-H item 2"
};

// DeepSpeed's format: `HOST slots=N` per line; `HOST` alone means one slot (OpenMPI's hostfile);
// '#' starts a comment; blank lines are skipped. `source` names the file in errors. Throws
// std::invalid_argument with one line "FILE:LINE: what is wrong, found 'the line'" for a malformed
// line, a host listed twice, or a file without hosts.
std::vector<Host> parse_hostfile(const std::string& text, const std::string& source);
// Reads and parses the file; an unreadable file is an std::invalid_argument naming it.
std::vector<Host> read_hostfile(const std::string& path);
// Horovod's -H: "host1:2,host2:2", a host without ":N" has one slot.
std::vector<Host> parse_host_list(const std::string& list);

}  // namespace dtrain::launch
