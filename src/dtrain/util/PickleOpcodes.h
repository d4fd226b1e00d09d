// The opcodes of Python's pickle protocol, 0 to 5, as data: each opcode's byte, its name and the
// argument that follows it in the stream, after the table of CPython's Lib/pickletools.py. The one
// table dtrain's pickle decoder (util/PickleDecoder.h) and every message naming an opcode read.
#pragma once

#include <array>
#include <cstdint>

namespace dtrain::util {

// What follows an opcode's byte in the stream.
enum class PickleArgKind : std::uint8_t {
  none,
  fixed,         // `width` bytes, a little-endian integer (BINFLOAT's 8 are a big-endian double)
  line,          // text up to a newline (protocol 0's INT, FLOAT, STRING, GET, PUT, ...)
  two_lines,     // GLOBAL and INST: a module and a name, each up to a newline
  text,          // a little-endian length of `width` bytes, then that many bytes of UTF-8
  bytes,         // a little-endian length of `width` bytes, then that many bytes
  signed_bytes,  // as bytes, but the 4-byte length is signed and may not be negative
  long1,         // LONG1: a 1-byte length, then a little-endian two's complement integer
};

struct PickleOpcode {
  std::uint8_t code;
  const char* name;
  PickleArgKind arg = PickleArgKind::none;
  std::uint8_t width = 0;  // fixed: the argument's bytes; text, bytes, signed_bytes: the length's
};

// In pickletools' order: protocols 0 and 1, then what each later protocol added.
inline constexpr PickleOpcode kPickleOpcodes[] = {
    {'(', "MARK"},
    {'.', "STOP"},
    {'0', "POP"},
    {'1', "POP_MARK"},
    {'2', "DUP"},
    {'F', "FLOAT", PickleArgKind::line},
    {'I', "INT", PickleArgKind::line},
    {'J', "BININT", PickleArgKind::fixed, 4},
    {'K', "BININT1", PickleArgKind::fixed, 1},
    {'L', "LONG", PickleArgKind::line},
    {'M', "BININT2", PickleArgKind::fixed, 2},
    {'N', "NONE"},
    {'P', "PERSID", PickleArgKind::line},
    {'Q', "BINPERSID"},
    {'R', "REDUCE"},
    {'S', "STRING", PickleArgKind::line},
    {'T', "BINSTRING", PickleArgKind::signed_bytes, 4},
    {'U', "SHORT_BINSTRING", PickleArgKind::bytes, 1},
    {'V', "UNICODE", PickleArgKind::line},
    {'X', "BINUNICODE", PickleArgKind::text, 4},
    {'a', "APPEND"},
    {'b', "BUILD"},
    {'c', "GLOBAL", PickleArgKind::two_lines},
    {'d', "DICT"},
    {'}', "EMPTY_DICT"},
    {'e', "APPENDS"},
    {'g', "GET", PickleArgKind::line},
    {'h', "BINGET", PickleArgKind::fixed, 1},
    {'i', "INST", PickleArgKind::two_lines},
    {'j', "LONG_BINGET", PickleArgKind::fixed, 4},
    {'l', "LIST"},
    {']', "EMPTY_LIST"},
    {'o', "OBJ"},
    {'p', "PUT", PickleArgKind::line},
    {'q', "BINPUT", PickleArgKind::fixed, 1},
    {'r', "LONG_BINPUT", PickleArgKind::fixed, 4},
    {'s', "SETITEM"},
    {'t', "TUPLE"},
    {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"},
    {'G', "BINFLOAT", PickleArgKind::fixed, 8},
    // Protocol 2.
    {0x80, "PROTO", PickleArgKind::fixed, 1},
    {0x81, "NEWOBJ"},
    {0x82, "EXT1", PickleArgKind::fixed, 1},
    {0x83, "EXT2", PickleArgKind::fixed, 2},
    {0x84, "EXT4", PickleArgKind::fixed, 4},
    {0x85, "TUPLE1"},
    {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"},
    {0x8a, "LONG1", PickleArgKind::long1, 1},
    {0x8b, "LONG4", PickleArgKind::signed_bytes, 4},
    // Protocol 3.
    {'B', "BINBYTES", PickleArgKind::bytes, 4},
    {'C', "SHORT_BINBYTES", PickleArgKind::bytes, 1},
    // Protocol 4.
    {0x8c, "SHORT_BINUNICODE", PickleArgKind::text, 1},
    {0x8d, "BINUNICODE8", PickleArgKind::text, 8},
    {0x8e, "BINBYTES8", PickleArgKind::bytes, 8},
    {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},
    {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"},
    {0x94, "MEMOIZE"},
    {0x95, "FRAME", PickleArgKind::fixed, 8},
    // Protocol 5.
    {0x96, "BYTEARRAY8", PickleArgKind::bytes, 8},
    {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
};

// The opcode whose byte is `code`, or null when no protocol defines one.
inline const PickleOpcode* find_pickle_opcode(std::uint8_t code) {
  static const auto by_code = [] {
    std::array<const PickleOpcode*, 256> index{};
    for (const auto& opcode : kPickleOpcodes) index[opcode.code] = &opcode;
    return index;
  }();
  return by_code[code];
}

// "BINUNICODE" for 'X'; "" for a byte that is no opcode.
inline const char* pickle_opcode_name(std::uint8_t code) {
  const PickleOpcode* opcode = find_pickle_opcode(code);
  return opcode ? opcode->name : "";
}

}  // namespace dtrain::util
