// Gloo of 2025 on writes a line to std::cerr for every mesh it connects ("[.../tcp/context.cc:243]
// INFO Rank 0 is connected to 1. Expected number of connected peers is: 1"), once for every group a
// rank joins: noise in each rank's output, and a second line before dtrain's one-line errors.
// WithoutGlooConnectLines holds std::cerr while groups connect and then writes out what it held,
// less those lines.
#pragma once

#include <string>

namespace dtrain::comm {

// For its lifetime, std::cerr goes to a buffer shared by every scope alive at once (ranks that are
// threads of one process connect at the same time); when the last one ends, std::cerr is restored
// and the buffer written to it, without Gloo's connection lines. Writes from other threads in the
// meantime are held and written out too, late but whole.
class WithoutGlooConnectLines {
 public:
  WithoutGlooConnectLines();
  ~WithoutGlooConnectLines();
  WithoutGlooConnectLines(const WithoutGlooConnectLines&) = delete;
  WithoutGlooConnectLines& operator=(const WithoutGlooConnectLines&) = delete;
};

// `text` without the lines that are Gloo's report of a connected mesh.
std::string without_gloo_connect_lines(const std::string& text);

}  // namespace dtrain::comm
