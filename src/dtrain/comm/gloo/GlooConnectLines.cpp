// See GlooConnectLines.h.
#include "dtrain/comm/gloo/GlooConnectLines.h"

#include <iostream>
#include <mutex>
#include <sstream>
#include <streambuf>

namespace dtrain::comm {
namespace {

// An unbuffered stream buffer that appends to a string under a lock: Gloo's threads (one per rank
// of an in-process world) write to std::cerr at once.
class HeldText : public std::streambuf {
 public:
  std::string take() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    out.swap(text_);
    return out;
  }

 protected:
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      std::lock_guard<std::mutex> lock(mutex_);
      text_.push_back(traits_type::to_char_type(c));
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard<std::mutex> lock(mutex_);
    text_.append(s, static_cast<std::size_t>(n));
    return n;
  }

 private:
  std::mutex mutex_;
  std::string text_;
};

struct Holding {
  std::mutex mutex;
  int scopes = 0;
  std::streambuf* saved = nullptr;
  HeldText held;
};

Holding& holding() {
  static Holding h;
  return h;
}

}  // namespace

std::string without_gloo_connect_lines(const std::string& text) {
  std::istringstream lines(text);
  std::string out, line;
  while (std::getline(lines, line)) {
    const bool connected =
        line.find("] INFO Rank ") != std::string::npos && line.find(" is connected to ") != std::string::npos;
    if (connected) continue;
    out += line;
    if (!lines.eof()) out += '\n';
  }
  return out;
}

WithoutGlooConnectLines::WithoutGlooConnectLines() {
  auto& h = holding();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (h.scopes++ == 0) h.saved = std::cerr.rdbuf(&h.held);
}

WithoutGlooConnectLines::~WithoutGlooConnectLines() {
  auto& h = holding();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (--h.scopes > 0) return;
  std::cerr.rdbuf(h.saved);
  std::cerr << without_gloo_connect_lines(h.held.take()) << std::flush;
}

}  // namespace dtrain::comm
