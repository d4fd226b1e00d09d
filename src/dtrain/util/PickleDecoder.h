// The one decoder of Python's pickle protocol in dtrain: it reads a pickle opcode by opcode, each
// with its argument as the opcode table (util/PickleOpcodes.h) describes it, and keeps no stack:
// what the opcodes build is its caller's (Note [One pickle decoder]).
//
// Note [One pickle decoder]
// dtrain reads pickles in two places: util/ArchiveCheck.h walks the pickles of a LibTorch archive
// for the numbers LibTorch trusts before LibTorch reads them, and data/Pickle.cpp builds the
// values of downsampled ImageNet's batch files. Both need the same reading of the stream and the
// same defence against a crafted file, so the reading is here, once: every length is checked
// against the bytes that remain before anything is read, allocated or skipped; a run of bytes
// longer than PickleLimits::read_bytes is skipped, not read (an Imagenet64 batch's array is 1.5 GB;
// its reader copies it into its tensor later); nothing is executed. A pickle that runs out or breaks
// a limit throws PickleDecodeError saying what and how much, which each caller words in its own
// message, naming its file and the opcode's offset. What an opcode does to the stack, and which
// opcodes and globals are accepted, is the caller's. A pickle nests values as deep as it is long (a
// 2 MB run of TUPLE1 nests two million tuples), so a caller's values free what they hold in a loop,
// with release_items(): destructors nested two million deep overflow an 8 MB stack.
#pragma once

#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/util/PickleOpcodes.h"

namespace dtrain::util {

// Where a pickle's bytes come from. The decoder asks for them in order, each once, and never past
// the size it was given.
class PickleInput {
 public:
  virtual ~PickleInput() = default;
  // The byte at `at`.
  virtual std::uint8_t byte(std::uint64_t at) = 0;
  // `count` bytes from `at` into `out`.
  virtual void read(std::uint64_t at, char* out, std::uint64_t count) = 0;
  // Passes over `count` bytes from `at` without reading them.
  virtual void skip(std::uint64_t at, std::uint64_t count) = 0;
};

// A pickle held in memory (`bytes` must outlive it).
class PickleMemoryInput final : public PickleInput {
 public:
  explicit PickleMemoryInput(std::string_view bytes) : bytes_(bytes) {}
  std::uint8_t byte(std::uint64_t at) override { return static_cast<std::uint8_t>(bytes_[at]); }
  void read(std::uint64_t at, char* out, std::uint64_t count) override {
    if (count > 0) std::memcpy(out, bytes_.data() + at, count);
  }
  void skip(std::uint64_t, std::uint64_t) override {}

 private:
  std::string_view bytes_;
};

// What the decoder was reading when the pickle ran out.
enum class PicklePart {
  argument,  // an opcode's fixed-width argument, a length field, LONG1's bytes
  line,      // a text line (one more byte, looking for its newline)
  length,    // a length larger than the whole pickle
  text,      // a string's bytes
  bytes,     // a run of bytes
  frame,     // a frame's bytes (PickleDecoder::claim)
};

// Why a pickle cannot be decoded; each caller words it for its own file (Note [One pickle decoder]).
class PickleDecodeError : public std::runtime_error {
 public:
  enum Kind {
    truncated,        // `claimed` bytes of `part` were wanted; `remaining` are left
    negative_length,  // BINSTRING's or LONG4's signed length is negative
    long_too_wide,    // LONG1 of `claimed` bytes, beyond PickleLimits::long1
    line_too_long,    // a line beyond PickleLimits::line (`claimed`)
  };
  PickleDecodeError(Kind kind, PicklePart part, std::uint64_t claimed, std::uint64_t remaining)
      : std::runtime_error("a pickle that cannot be decoded (" + std::to_string(claimed) +
                           " bytes claimed, " + std::to_string(remaining) + " remain)"),
        kind(kind),
        part(part),
        claimed(claimed),
        remaining(remaining) {}

  Kind kind;
  PicklePart part;
  std::uint64_t claimed;
  std::uint64_t remaining;
};

// What a reader of a pickle accepts beyond the protocol itself.
struct PickleLimits {
  std::uint64_t line = std::numeric_limits<std::uint64_t>::max();   // a text line's bytes
  std::uint64_t long1 = std::numeric_limits<std::uint64_t>::max();  // LONG1's bytes, refused before reading
  // Runs of bytes up to this long are read into PickleArg::text; longer ones are skipped.
  std::uint64_t read_bytes = 256;
};

// An opcode as read from the stream.
struct PickleOp {
  std::uint64_t at = 0;  // its offset
  std::uint8_t code = 0;
  const PickleOpcode* opcode = nullptr;  // null: the byte is no pickle opcode
};

// An opcode's argument, decoded.
struct PickleArg {
  // fixed: the little-endian integer; long1: its two's complement value sign-extended to 64 bits.
  std::uint64_t number = 0;
  bool fits = true;  // long1: false when wider than 8 bytes (number is then 0)
  // line: the text; two_lines: the module; text: the string; bytes: the bytes unless skipped.
  std::string text;
  std::string name;        // two_lines: the name
  std::uint64_t size = 0;  // text, bytes: the length
  bool skipped = false;    // bytes longer than PickleLimits::read_bytes, left in the input at `offset`
  std::uint64_t offset = 0;
};

// Frees the values `items` holds in a loop, not by recursion (Note [One pickle decoder]): for a
// value type whose nested values are its `items`, called by its destructor. A value another owner
// still shares is left to that owner.
template <class Ptr>
void release_items(std::vector<Ptr>& items) {
  std::vector<Ptr> pending = std::move(items);
  while (!pending.empty()) {
    Ptr value = std::move(pending.back());
    pending.pop_back();
    if (value.use_count() == 1 && !value->items.empty()) {
      // Its only owner may take its items (a const Ptr's value was made non-const, by make_shared,
      // or it has no items).
      auto& nested = const_cast<std::vector<Ptr>&>(value->items);
      std::move(nested.begin(), nested.end(), std::back_inserter(pending));
      nested.clear();
    }
  }
}

class PickleDecoder {
 public:
  PickleDecoder(PickleInput& input, std::uint64_t size, PickleLimits limits = {})
      : input_(input), size_(size), limits_(limits) {}

  bool at_end() const { return pos_ >= size_; }
  std::uint64_t size() const { return size_; }
  std::uint64_t position() const { return pos_; }
  // The opcode read last.
  const PickleOp& op() const { return op_; }

  // Reads the next opcode's byte; at_end() must be false. Its argument is read by argument().
  const PickleOp& next() {
    op_.at = pos_;
    op_.code = input_.byte(pos_++);
    op_.opcode = find_pickle_opcode(op_.code);
    return op_;
  }

  // Reads the argument of the opcode read last, as the table describes it (none for a byte that
  // is no opcode).
  PickleArg argument() {
    PickleArg arg;
    if (op_.opcode == nullptr) return arg;
    const int width = op_.opcode->width;
    switch (op_.opcode->arg) {
      case PickleArgKind::none:
        break;
      case PickleArgKind::fixed:
        arg.number = number(width);
        break;
      case PickleArgKind::line:
        arg.text = line();
        break;
      case PickleArgKind::two_lines:
        arg.text = line();
        arg.name = line();
        break;
      case PickleArgKind::text:
      case PickleArgKind::bytes:
      case PickleArgKind::signed_bytes:
        counted(width, arg);
        break;
      case PickleArgKind::long1:
        long1(arg);
        break;
    }
    return arg;
  }

  // Checks that `count` bytes claimed by the opcode read last lie within the pickle: refused as a
  // `length` beyond the whole pickle, or as `part` beyond what remains.
  void claim(std::uint64_t count, PicklePart part) const {
    if (count > size_)
      throw PickleDecodeError(PickleDecodeError::truncated, PicklePart::length, count, size_ - pos_);
    need(count, part);
  }

 private:
  void need(std::uint64_t count, PicklePart part) const {
    if (count > size_ - pos_)
      throw PickleDecodeError(PickleDecodeError::truncated, part, count, size_ - pos_);
  }

  std::uint64_t number(int width) {
    need(static_cast<std::uint64_t>(width), PicklePart::argument);
    std::uint64_t value = 0;
    for (int i = 0; i < width; ++i) value |= std::uint64_t{input_.byte(pos_++)} << (8 * i);
    return value;
  }

  std::string line() {
    std::string text;
    while (true) {
      need(1, PicklePart::line);
      const std::uint8_t c = input_.byte(pos_++);
      if (c == '\n') return text;
      if (text.size() >= limits_.line) {
        throw PickleDecodeError(PickleDecodeError::line_too_long, PicklePart::line, limits_.line,
                                size_ - pos_);
      }
      text.push_back(static_cast<char>(c));
    }
  }

  // A length of `width` bytes and what it counts.
  void counted(int width, PickleArg& arg) {
    const std::uint64_t length = number(width);
    if (op_.opcode->arg == PickleArgKind::signed_bytes && (length & 0x80000000U)) {
      throw PickleDecodeError(PickleDecodeError::negative_length, PicklePart::argument, length, size_ - pos_);
    }
    const bool is_text = op_.opcode->arg == PickleArgKind::text;
    claim(length, is_text ? PicklePart::text : PicklePart::bytes);
    arg.size = length;
    if (is_text || length <= limits_.read_bytes) {
      arg.text.resize(static_cast<std::size_t>(length));
      input_.read(pos_, arg.text.data(), length);
    } else {
      arg.skipped = true;
      arg.offset = pos_;
      input_.skip(pos_, length);
    }
    pos_ += length;
  }

  void long1(PickleArg& arg) {
    const std::uint64_t length = number(1);
    if (length > limits_.long1) {
      throw PickleDecodeError(PickleDecodeError::long_too_wide, PicklePart::argument, length, size_ - pos_);
    }
    need(length, PicklePart::argument);
    if (length > 8) {
      arg.fits = false;
      input_.skip(pos_, length);
      pos_ += length;
      return;
    }
    const std::uint64_t raw = number(static_cast<int>(length));
    const bool negative = length > 0 && length < 8 && ((raw >> (8 * length - 1)) & 1);
    arg.number = negative ? raw | (~std::uint64_t{0} << (8 * length)) : raw;
  }

  PickleInput& input_;
  std::uint64_t size_;
  PickleLimits limits_;
  std::uint64_t pos_ = 0;
  PickleOp op_;
};

}  // namespace dtrain::util
