// Reading and checking sentence rows; see SentenceFile.h.
#include "dtrain/data/SentenceFile.h"

#include <torch/types.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <tuple>

namespace dtrain::data {
namespace {

using config::SentenceFormat;

// Where the first invalid UTF-8 sequence of `text` starts, or npos: overlong forms, surrogates and
// code points above U+10FFFF are invalid, as the standard says (and as Python's decoder refuses).
std::size_t invalid_utf8_at(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int more = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      more = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      more = 2;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      more = 3;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + more >= text.size()) return i;  // cut short
    for (int k = 1; k <= more; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return i;
    }
    i += more + 1;
  }
  return std::string_view::npos;
}

bool blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

std::vector<std::string_view> columns(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const auto tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) return out;
    start = tab + 1;
  }
}

// One line's place in its file, for the one-line refusals.
struct Where {
  const std::string& path;
  std::size_t line;
  std::string prefix() const { return path + ":" + std::to_string(line) + ": "; }
};

std::int64_t label_index(const Where& at, const std::string& label, const std::vector<std::string>* labels) {
  if (!labels) return -1;
  const auto found = std::find(labels->begin(), labels->end(), label);
  if (found != labels->end()) return found - labels->begin();
  std::string set;
  for (const auto& l : *labels) set += (set.empty() ? "" : ", ") + l;
  TORCH_CHECK(false, at.prefix(), "label '", label, "' is not one of ", set,
              "; fix the row, or list the labels in data.labels");
  return -1;
}

// A TSV row of `count` columns, the sentence at `text` and the label at `label`.
std::pair<std::string_view, std::string> tsv_row(const Where& at, std::string_view line, std::size_t count,
                                                 std::size_t text, std::size_t label, const char* layout) {
  const auto cells = columns(line);
  TORCH_CHECK(cells.size() != 1, at.prefix(), "no tab; a ", layout, " row has ", count,
              " tab-separated columns");
  TORCH_CHECK(cells.size() == count, at.prefix(), "found ", cells.size(), " tab-separated columns, expected ",
              count, " (", layout, ")");
  return {cells[text], std::string(cells[label])};
}

std::pair<std::string, std::string> jsonl_row(const Where& at, std::string_view line) {
  nlohmann::json row;
  try {
    row = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, at.prefix(), "not a JSON object: ", e.what());
  }
  TORCH_CHECK(row.is_object() && row.contains("text") && row["text"].is_string() && row.contains("label"),
              at.prefix(), "expected {\"text\": \"...\", \"label\": ...}");
  const auto& label = row["label"];
  std::string text_label;
  if (label.is_string()) {
    text_label = label.get<std::string>();
  } else if (label.is_number_integer()) {
    text_label = std::to_string(label.get<std::int64_t>());
  } else {
    TORCH_CHECK(false, at.prefix(), "the label is ", label.dump(), "; expected a string or an integer");
  }
  return {row["text"].get<std::string>(), text_label};
}

void add_row(SentenceRows& rows, const Where& at, std::string_view line, SentenceFormat format,
             const std::vector<std::string>* labels) {
  std::string sentence;
  std::string label;
  switch (format) {
    case SentenceFormat::Cola: {
      auto [s, l] = tsv_row(at, line, 4, 3, 1, "CoLA: source, label, original label, sentence");
      sentence = s;
      label = l;
      break;
    }
    case SentenceFormat::Sst2:
    case SentenceFormat::Tsv: {
      auto [s, l] = tsv_row(at, line, 2, 0, 1, "sentence<TAB>label");
      sentence = s;
      label = l;
      break;
    }
    case SentenceFormat::Jsonl:
      std::tie(sentence, label) = jsonl_row(at, line);
      break;
    case SentenceFormat::Auto:
      TORCH_INTERNAL_ASSERT(false, "parse_sentences: the format is resolved before rows are read");
  }
  TORCH_CHECK(!blank(sentence), at.prefix(), "the sentence is empty");
  rows.labels.push_back(label_index(at, label, labels));
  rows.sentences.push_back(std::move(sentence));
}

}  // namespace

std::string read_sentence_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, path, ": cannot open for reading");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

config::SentenceFormat detect_sentence_format(const std::string& path, std::string_view contents) {
  const std::string_view jsonl = ".jsonl";
  if (path.size() >= jsonl.size() && path.compare(path.size() - jsonl.size(), jsonl.size(), jsonl) == 0) {
    return SentenceFormat::Jsonl;
  }
  auto first = contents.substr(0, std::min(contents.find('\n'), kMaxSentenceLineBytes + 1));
  if (!first.empty() && first.back() == '\r') first.remove_suffix(1);
  if (first == "sentence\tlabel") return SentenceFormat::Sst2;
  const auto cells = columns(first).size();
  if (cells == 4) return SentenceFormat::Cola;
  if (cells == 2) return SentenceFormat::Tsv;
  TORCH_CHECK(false, path, ":1: a first line of ", cells,
              " tab-separated columns names no sentence layout; expected CoLA's 4 columns, SST-2's header "
              "sentence<TAB>label, text<TAB>label, or a .jsonl file; or set data.sentence_format");
  return SentenceFormat::Auto;
}

SentenceRows parse_sentences(const std::string& path, std::string_view contents,
                             config::SentenceFormat format, const std::vector<std::string>* labels) {
  SentenceRows rows;
  std::size_t start = 0;
  std::size_t number = 0;
  while (start < contents.size()) {
    const auto end = std::min(contents.find('\n', start), contents.size());
    auto line = contents.substr(start, end - start);
    start = end + 1;
    const Where at{path, ++number};
    TORCH_CHECK(line.size() <= kMaxSentenceLineBytes, at.prefix(), "a line of ", line.size(),
                " bytes, more than ", kMaxSentenceLineBytes, "; is this a sentence file?");
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // written on Windows
    const auto bad = invalid_utf8_at(line);
    TORCH_CHECK(bad == std::string_view::npos, at.prefix(), "invalid UTF-8 at byte ", bad + 1,
                " of the line; save the file as UTF-8");
    if (number == 1 && format == SentenceFormat::Sst2) {
      TORCH_CHECK(line == "sentence\tlabel", at.prefix(), "expected SST-2's header sentence<TAB>label");
      continue;
    }
    TORCH_CHECK(!line.empty(), at.prefix(), "an empty line; a ", config::kSentenceFormatNames.name(format),
                " file has one row a line");
    add_row(rows, at, line, format, labels);
  }
  return rows;
}

}  // namespace dtrain::data
