// Note [One pickle decoder]: the opcode table against CPython's pickletools (where python3 is
// installed), each kind of argument decoded, and every way a pickle can run out or break a limit
// reported with what was claimed and what remained.
#include "dtrain/util/PickleDecoder.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>

namespace dtrain::util {
namespace {

// Decodes the first opcode of `pickle` and its argument.
PickleArg first_argument(const std::string& pickle, PickleLimits limits = {}) {
  PickleMemoryInput input(pickle);
  PickleDecoder decoder(input, pickle.size(), limits);
  decoder.next();
  return decoder.argument();
}

// The error decoding the first opcode's argument raises; fails the test if none.
PickleDecodeError first_error(const std::string& pickle, PickleLimits limits = {}) {
  try {
    first_argument(pickle, limits);
  } catch (const PickleDecodeError& e) {
    return e;
  }
  ADD_FAILURE() << "no error decoding " << pickle;
  return PickleDecodeError(PickleDecodeError::truncated, PicklePart::argument, 0, 0);
}

// pickletools' argument size: n bytes; -1 a line; -2, -3, -4, -5 a length of 1, signed 4, 4, 8 bytes.
int pickletools_size(const PickleOpcode& op) {
  switch (op.arg) {
    case PickleArgKind::fixed:
      return op.width;
    case PickleArgKind::line:
    case PickleArgKind::two_lines:
      return -1;
    case PickleArgKind::signed_bytes:
      return -3;
    case PickleArgKind::text:
    case PickleArgKind::bytes:
    case PickleArgKind::long1:
      return op.width == 1 ? -2 : op.width == 4 ? -4 : -5;
    case PickleArgKind::none:
      break;
  }
  return 0;
}

TEST(PickleOpcodes, EveryOpcodeOfProtocolsZeroToFiveOnce) {
  std::set<int> codes;
  std::set<std::string> names;
  for (const auto& op : kPickleOpcodes) {
    EXPECT_TRUE(codes.insert(op.code).second) << op.name;
    EXPECT_TRUE(names.insert(op.name).second) << op.name;
    EXPECT_EQ(find_pickle_opcode(op.code), &op);
  }
  EXPECT_EQ(codes.size(), 68U);
  EXPECT_EQ(find_pickle_opcode(0xff), nullptr);
  EXPECT_STREQ(pickle_opcode_name('X'), "BINUNICODE");
  EXPECT_STREQ(pickle_opcode_name(0x00), "");
}

TEST(PickleOpcodes, TheTableIsPickletools) {
  const char* script =
      "python3 -c \"import pickletools\n"
      "for o in pickletools.opcodes: print(ord(o.code.encode('latin1')), o.name, o.arg.n if o.arg else 0)\" "
      "2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(script, "r"), pclose);
  std::string listing;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof(buffer), pipe.get())) listing += buffer;
  if (listing.empty()) GTEST_SKIP() << "no python3: the table is checked for its size and names only";
  std::istringstream lines(listing);
  int count = 0;
  int code = 0;
  int size = 0;
  std::string name;
  while (lines >> code >> name >> size) {
    ++count;
    const PickleOpcode* op = find_pickle_opcode(static_cast<std::uint8_t>(code));
    ASSERT_NE(op, nullptr) << name;
    EXPECT_EQ(op->name, name);
    EXPECT_EQ(pickletools_size(*op), size) << name;
  }
  EXPECT_EQ(count, static_cast<int>(std::size(kPickleOpcodes)));
}

TEST(PickleDecoder, DecodesEachKindOfArgument) {
  EXPECT_EQ(first_argument(std::string("J\xfe\xff\xff\xff", 5)).number, 0xfffffffeU);
  EXPECT_EQ(first_argument("cnumpy\ndtype\n").text, "numpy");
  EXPECT_EQ(first_argument("cnumpy\ndtype\n").name, "dtype");
  EXPECT_EQ(first_argument("I42\n").text, "42");
  EXPECT_EQ(first_argument(std::string("X\x03\x00\x00\x00xyz", 8)).text, "xyz");
  EXPECT_EQ(first_argument("C\x02xy").text, "xy");
  // Bytes beyond PickleLimits::read_bytes are left in the input, at their offset.
  PickleLimits limits;
  limits.read_bytes = 2;
  const auto skipped = first_argument("C\x03xyz", limits);
  EXPECT_TRUE(skipped.skipped);
  EXPECT_EQ(skipped.offset, 2U);
  EXPECT_EQ(skipped.size, 3U);
  EXPECT_EQ(skipped.text, "");
  // LONG1: little-endian two's complement, sign-extended; wider than 64 bits does not fit.
  EXPECT_EQ(static_cast<std::int64_t>(first_argument("\x8a\x01\xff").number), -1);
  EXPECT_EQ(static_cast<std::int64_t>(first_argument(std::string("\x8a\x02\x00\x80", 4)).number), -32768);
  EXPECT_EQ(first_argument(std::string("\x8a\x02\xff\x00", 4)).number, 255U);
  EXPECT_EQ(first_argument(std::string("\x8a\x00", 2)).number, 0U);
  EXPECT_FALSE(first_argument("\x8a\x09" + std::string(9, '\x01')).fits);
}

TEST(PickleDecoder, ReportsWhatWasClaimedAndWhatRemains) {
  // A length beyond the remaining bytes, and beyond the whole pickle.
  auto e = first_error(std::string("X\x05\x00\x00\x00xyz", 8));
  EXPECT_EQ(e.kind, PickleDecodeError::truncated);
  EXPECT_EQ(e.part, PicklePart::text);
  EXPECT_EQ(e.claimed, 5U);
  EXPECT_EQ(e.remaining, 3U);
  e = first_error(std::string("B\xf0\xff\xff\xffxyz", 8));
  EXPECT_EQ(e.part, PicklePart::length);
  EXPECT_EQ(e.claimed, 0xfffffff0U);
  EXPECT_EQ(first_error(std::string("B\x04\x00\x00\x00xyz", 8)).part, PicklePart::bytes);
  // A fixed argument or a length field cut short; a line without its newline.
  e = first_error("J\x01\x02");
  EXPECT_EQ(e.part, PicklePart::argument);
  EXPECT_EQ(e.claimed, 4U);
  EXPECT_EQ(e.remaining, 2U);
  EXPECT_EQ(first_error("cos\nsystem").part, PicklePart::line);
  // BINSTRING's and LONG4's signed lengths; BINBYTES's is unsigned.
  EXPECT_EQ(first_error("T\xff\xff\xff\xff").kind, PickleDecodeError::negative_length);
  EXPECT_EQ(first_error(std::string("\x8b\x00\x00\x00\x80", 5)).kind, PickleDecodeError::negative_length);
  EXPECT_EQ(first_error("B\xff\xff\xff\xff").part, PicklePart::length);
  // The caller's limits.
  PickleLimits limits;
  limits.line = 3;
  limits.long1 = 8;
  EXPECT_EQ(first_error("cnumpy\ndtype\n", limits).kind, PickleDecodeError::line_too_long);
  EXPECT_EQ(first_argument("cos\nsystem\n", PickleLimits{}).text, "os");
  e = first_error("\x8a\x09" + std::string(9, '\x01'), limits);
  EXPECT_EQ(e.kind, PickleDecodeError::long_too_wide);
  EXPECT_EQ(e.claimed, 9U);
}

TEST(PickleDecoder, WalksAPickleOpcodeByOpcode) {
  // {'k': 1} as Python 3.8 writes it with protocol 4, less the frame.
  const std::string pickle("\x80\x04}\x94\x8c\x01k\x94K\x01s.", 12);
  PickleMemoryInput input(pickle);
  PickleDecoder decoder(input, pickle.size());
  std::string names;
  while (!decoder.at_end()) {
    const PickleOp& op = decoder.next();
    decoder.argument();
    names += std::string(names.empty() ? "" : " ") + op.opcode->name + "@" + std::to_string(op.at);
  }
  EXPECT_EQ(names,
            "PROTO@0 EMPTY_DICT@2 MEMOIZE@3 SHORT_BINUNICODE@4 MEMOIZE@7 BININT1@8 SETITEM@10 STOP@11");
  EXPECT_EQ(decoder.position(), pickle.size());
}

// A value type as the decoder's callers write one: its nested values are its items.
struct Nested {
  std::vector<std::shared_ptr<const Nested>> items;
  ~Nested() { release_items(items); }
};

TEST(PickleDecoder, ReleaseItemsFreesDeepNestingInALoop) {
  auto root = std::make_shared<const Nested>();
  std::weak_ptr<const Nested> shared_leaf;
  for (int depth = 0; depth < 2000000; ++depth) {
    auto parent = std::make_shared<Nested>();
    parent->items.push_back(std::move(root));
    root = std::move(parent);
    if (depth == 10) shared_leaf = root;
  }
  auto kept = shared_leaf.lock();  // a value another owner shares stays alive with what it holds
  root.reset();
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->items.size(), 1U);
}

}  // namespace
}  // namespace dtrain::util
