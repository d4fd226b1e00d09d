// The row layouts of labelled sentences: GLUE's CoLA (four tab-separated columns, no header: source,
// label, original label, sentence), GLUE's SST-2 (a header `sentence<TAB>label`, then such rows), a
// plain `text<TAB>label` file and JSON lines ({"text": .., "label": ..}). Every row is checked; a bad
// one is refused in one line naming the file and the line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/config/RunConfig.h"

namespace dtrain::data {

// A line longer than this is refused: no sentence of GLUE comes near it, and a file that has one
// is not a sentence file (or lost its line ends).
inline constexpr std::size_t kMaxSentenceLineBytes = 64 * 1024;

struct SentenceRows {
  std::vector<std::string> sentences;
  // The index of each row's label in the label set; -1 when labels are not checked.
  std::vector<std::int64_t> labels;
};

// The layout of a file under data.sentence_format auto: jsonl for a name ending in .jsonl; sst2 when
// the first line is the header `sentence<TAB>label`; else cola for four columns and tsv for two.
// Refuses any other first line, naming the file.
config::SentenceFormat detect_sentence_format(const std::string& path, std::string_view contents);

// The rows of `contents` (the bytes of `path`) in `format` (not auto). `labels`: the label set, the
// text of class 0 first (a JSON label may be a number, read as its digits); null: any label, -1 each.
// A row is refused for a missing tab or a wrong column count, a label outside the set, invalid UTF-8,
// an empty sentence, a line over kMaxSentenceLineBytes or an empty line.
SentenceRows parse_sentences(const std::string& path, std::string_view contents,
                             config::SentenceFormat format, const std::vector<std::string>* labels);

// The whole file, refused by name when it cannot be read.
std::string read_sentence_file(const std::string& path);

}  // namespace dtrain::data
