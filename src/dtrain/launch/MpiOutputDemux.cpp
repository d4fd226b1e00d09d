// mpirun tags what it reads from a rank piece by piece: a long line can reach it in two reads,
// and then a second tag sits in the middle of the line
// ("[1,0]<stdout>:{..part one[1,0]<stdout>:part two\n"), so tags are taken out wherever they are.
#include "dtrain/launch/MpiOutputDemux.h"

#include <cstdio>
#include <cstring>

namespace dtrain::launch {

void MpiOutputDemux::write(bool is_stderr, std::string_view data) {
  std::string& partial = partial_[is_stderr ? 1 : 0];
  size_t start = 0;
  for (size_t newline; (newline = data.find('\n', start)) != std::string_view::npos; start = newline + 1) {
    partial.append(data.substr(start, newline - start));
    route(partial, /*complete=*/true);
    partial.clear();
  }
  partial.append(data.substr(start));
}

void MpiOutputDemux::finish(bool is_stderr) {
  std::string& partial = partial_[is_stderr ? 1 : 0];
  if (!partial.empty()) route(partial, /*complete=*/false);
  partial.clear();
  // A rank's stdout pieces come through mpirun's stdout, its stderr pieces through mpirun's stderr.
  for (auto& [key, text] : pieces_) {
    if (key.second != is_stderr && !text.empty()) deliver(key.first, key.second, text);
    if (key.second != is_stderr) text.clear();
  }
}

// The first "[<job>,<rank>]<stdout|stderr|stddiag>:" at or after `from`, for a rank of this job.
MpiOutputDemux::Tag MpiOutputDemux::find_tag(const std::string& line, size_t from) const {
  for (size_t at = line.find('[', from); at != std::string::npos; at = line.find('[', at + 1)) {
    int job = 0, rank = 0, consumed = 0;
    char stream[8] = {0};
    if (std::sscanf(line.c_str() + at, "[%d,%d]<%7[a-z]>:%n", &job, &rank, stream, &consumed) == 3 &&
        consumed > 0 && rank >= 0 && rank < static_cast<int>(logs_.size())) {
      return Tag{at, static_cast<size_t>(consumed), rank, std::strcmp(stream, "stdout") == 0};
    }
  }
  return Tag{};
}

void MpiOutputDemux::deliver(int rank, bool is_stdout, const std::string& text) {
  if (is_stdout) {
    logs_[rank]->write_stdout(text);
  } else {
    logs_[rank]->write_stderr(text);
  }
}

// A line of mpirun's output: its tagged pieces go to their ranks; the last piece ends that rank's
// line, the earlier ones are continued by a later tag of the same rank and stream.
void MpiOutputDemux::route(const std::string& line, bool complete) {
  Tag tag = find_tag(line, 0);
  if (tag.at == std::string::npos) {
    own_line(line);
    return;
  }
  if (tag.at > 0) own_line(line.substr(0, tag.at));
  while (tag.at != std::string::npos) {
    const size_t begin = tag.at + tag.length;
    const Tag next = find_tag(line, begin);
    const size_t end = next.at == std::string::npos ? line.size() : next.at;
    std::string& pending = pieces_[{tag.rank, tag.is_stdout}];
    pending.append(line, begin, end - begin);
    if (next.at == std::string::npos && complete) {
      deliver(tag.rank, tag.is_stdout, pending + "\n");
      pending.clear();
    }
    tag = next;
  }
}

void MpiOutputDemux::own_line(const std::string& line) {
  // --display-map, before the ranks start:
  //  " Data for JOB [23712,1] offset 0 Total slots allocated 2", " ===   JOB MAP   ===",
  //  " Data for node: vm<TAB>Num slots: 2 ...", " <TAB>Process OMPI jobid: [23712,1] App: 0 Process rank: 0
  //  ...", and a closing rule of '=' only, with empty lines between.
  if (line.find("Data for JOB [") != std::string::npos) {
    in_map_ = true;
    return;
  }
  if (in_map_) {
    const auto node = line.find("Data for node: ");
    const auto rank = line.find("Process rank: ");
    const bool rule =
        line.find_first_not_of(" =") == std::string::npos && line.find('=') != std::string::npos;
    if (node != std::string::npos) {
      const auto begin = node + std::strlen("Data for node: ");
      map_node_ = line.substr(begin, line.find_first_of(" \t", begin) - begin);
      return;
    }
    if (rank != std::string::npos) {
      int r = 0;
      if (std::sscanf(line.c_str() + rank, "Process rank: %d", &r) == 1) rank_nodes_[r] = map_node_;
      return;
    }
    if (rule) in_map_ = false;  // the closing rule
    if (rule || line.find_first_not_of(" \t") == std::string::npos ||
        line.find("JOB MAP") != std::string::npos) {
      return;
    }
    in_map_ = false;  // not the map's: a map without its closing rule ends here, the line is mpirun's own
  }
  if (line.find("unable to reliably start one or more daemons") != std::string::npos ||
      line.find("lost communication with a remote daemon") != std::string::npos) {
    daemon_lost_ = true;
  }
  // mpirun's reports of the first process that failed: "  Process name: [[18891,1],1]" after a
  // non-zero exit, "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9"
  // after a signal.
  int job = 0;
  const auto at = line.find("Process name: [[");
  if (at != std::string::npos) {
    int vpid = 0, failed = 0;
    if (std::sscanf(line.c_str() + at, "Process name: [[%d,%d],%d]", &job, &vpid, &failed) == 3 &&
        !failed_rank_) {
      failed_rank_ = failed;
    }
  }
  const auto noticed = line.find("noticed that process rank ");
  if (noticed != std::string::npos) {
    int failed = 0;
    if (std::sscanf(line.c_str() + noticed, "noticed that process rank %d", &failed) == 1 && !failed_rank_) {
      failed_rank_ = failed;
    }
  }
  diagnostics_.write(line + "\n");
}

}  // namespace dtrain::launch
