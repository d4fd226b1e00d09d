// Checking a LibTorch archive (torch.save's and torch::jit::save's zip of pickles and tensor
// records) before LibTorch reads it, so that a corrupt or crafted file is refused before it can
// make LibTorch allocate or read what it claims. Header-only; every layer that loads an archive
// links LibTorch already (c10's ScalarType names and sizes are used below).
//
// Note [Checking an archive before LibTorch reads it]
// LibTorch 1.13's readers trust three kinds of numbers in the file (found by fuzzing the
// checkpoint reader, tests/fuzz/):
//  - the unpickler's length-prefixed opcodes (BINUNICODE, BINBYTES, LONG4, ...): it allocates the
//    length a 4- or 8-byte field states and only then reads, so a 2,094-byte file asked for
//    malloc(2147483652) before the read failed (torch/csrc/jit/serialization/unpickler.cpp,
//    Unpickler::readBytes);
//  - a storage's element count in its persistent id ('storage', torch.FloatStorage, key,
//    location, numel): the Storage is made numel * itemsize bytes long over the record's data
//    whatever the record's size (the BINPERSID case there), so a count larger than the record
//    makes every later read of the tensor run past its buffer;
//  - a zip record's uncompressed size: PyTorchStreamReader::getRecord allocates it before
//    inflating. miniz checks a stored record's sizes against the archive, not a deflated one's.
// So before LibTorch sees the stream, check_archive() reads the zip's central directory itself
// (records stored, as torch.save and torch::jit::save write them, or deflated within deflate's
// largest ratio, 1032:1; every record inside the file), then walks every pickle opcode by opcode
// (the opcode table of CPython's Lib/pickletools.py, protocols 0 to 5): every length within the
// bytes that remain, the pickle ending at STOP, and with a small model of the stack (ints,
// strings, globals, tuples, the memo) every persistent id's numel * itemsize within its record.
// A file that fails is refused with what and where ("data.pkl: BINUNICODE at byte 26 claims
// 2147483651 bytes; 280 remain"). What LibTorch checks itself (an unknown global, a tensor's sizes
// against its storage, the protocol) is left to it.
#pragma once

#include <c10/core/ScalarType.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <istream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtrain::util {

// One record of a zip's central directory.
struct ZipRecord {
  std::uint16_t method = 0;  // 0 stored, 8 deflated
  std::uint64_t compressed = 0;
  std::uint64_t size = 0;    // uncompressed
  std::uint64_t offset = 0;  // of the local header
};

namespace archive_detail {

[[noreturn]] inline void refuse(const std::string& what) {
  throw std::runtime_error(what);
}

inline std::uint64_t le(const unsigned char* p, int bytes) {
  std::uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

inline std::string read_at(std::istream& in, std::uint64_t offset, std::uint64_t size) {
  std::string bytes(size, '\0');
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size)
    refuse("the zip directory runs past the end of the file");
  return bytes;
}

// What a pickle's stack holds, as far as the checks need it.
struct Value {
  enum Kind { kOther, kInt, kStr, kGlobal, kTuple } kind = kOther;
  std::int64_t integer = 0;
  std::string text;                                 // kStr; kGlobal: "module name"
  std::vector<std::shared_ptr<const Value>> items;  // kTuple
};
using ValuePtr = std::shared_ptr<const Value>;

inline ValuePtr other() {
  static const ValuePtr value = std::make_shared<const Value>();
  return value;
}
inline ValuePtr make_int(std::int64_t integer) {
  auto value = std::make_shared<Value>();
  value->kind = Value::kInt;
  value->integer = integer;
  return value;
}
inline ValuePtr make_text(Value::Kind kind, std::string text) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  value->text = std::move(text);
  return value;
}

// The bytes one storage type's element takes ("torch FloatStorage" -> 4), 0 if unknown.
inline std::uint64_t storage_item_size(const Value& type) {
  if (type.kind == Value::kInt) {
    if (type.integer < 0 || type.integer >= static_cast<std::int64_t>(c10::ScalarType::NumOptions)) return 0;
    return c10::elementSize(static_cast<c10::ScalarType>(type.integer));
  }
  if (type.kind != Value::kGlobal || type.text.rfind("torch ", 0) != 0) return 0;
  const std::string name = type.text.substr(6);
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    const auto scalar = static_cast<c10::ScalarType>(i);
    if (name == std::string(c10::toString(scalar)) + "Storage") return c10::elementSize(scalar);
  }
  return 0;
}

// Walks one pickle (see the Note). `records` maps a record's name (without the archive's
// top folder) to its size; `tensor_dir` is where this pickle's storages live ("data/").
inline void check_pickle(const std::string& name, const std::string& pickle, const std::string& tensor_dir,
                         const std::map<std::string, ZipRecord>& records) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(pickle.data());
  const std::uint64_t size = pickle.size();
  std::uint64_t pos = 0;
  std::vector<ValuePtr> stack;
  std::vector<std::size_t> marks;
  std::unordered_map<std::uint64_t, ValuePtr> memo;
  std::uint64_t at = 0;  // the current opcode's offset
  char op = 0;
  const auto fail = [&](const std::string& what) {
    refuse(name + ": opcode 0x" + "0123456789abcdef"[(static_cast<unsigned char>(op) >> 4) & 15] +
           "0123456789abcdef"[static_cast<unsigned char>(op) & 15] + " at byte " + std::to_string(at) + " " +
           what);
  };
  const auto take = [&](std::uint64_t count) -> const unsigned char* {
    if (count > size - pos) {
      fail("claims " + std::to_string(count) + " bytes; " + std::to_string(size - pos) + " remain");
    }
    const auto* start = bytes + pos;
    pos += count;
    return start;
  };
  const auto take_len = [&](int width) -> std::uint64_t {
    const std::uint64_t length = le(take(width), width);
    if (width == 4 && (op == 'T' || op == '\x8b') && (length & 0x80000000U)) fail("has a negative length");
    take(length);
    return length;
  };
  const auto line = [&]() -> std::string {
    const void* end = std::memchr(bytes + pos, '\n', size - pos);
    if (end == nullptr) fail("has no end of line");
    const auto length = static_cast<const unsigned char*>(end) - (bytes + pos);
    std::string text(reinterpret_cast<const char*>(bytes + pos), length);
    pos += length + 1;
    return text;
  };
  const auto pop = [&]() -> ValuePtr {
    if (stack.empty() || (!marks.empty() && stack.size() <= marks.back())) fail("pops an empty stack");
    auto value = stack.back();
    stack.pop_back();
    return value;
  };
  const auto pop_mark = [&]() -> std::vector<ValuePtr> {
    if (marks.empty()) fail("needs a MARK that is not there");
    std::vector<ValuePtr> items(stack.begin() + static_cast<std::ptrdiff_t>(marks.back()), stack.end());
    stack.resize(marks.back());
    marks.pop_back();
    return items;
  };
  const auto tuple = [&](std::vector<ValuePtr> items) {
    auto value = std::make_shared<Value>();
    value->kind = Value::kTuple;
    value->items = std::move(items);
    stack.push_back(std::move(value));
  };
  const auto get = [&](std::uint64_t id) {
    const auto found = memo.find(id);
    if (found == memo.end()) fail("reads memo " + std::to_string(id) + " before it is set");
    stack.push_back(found->second);
  };
  const auto put = [&](std::uint64_t id) {
    if (stack.empty()) fail("memoizes an empty stack");
    memo[id] = stack.back();
  };
  const auto text_of = [&](const unsigned char* start, std::uint64_t length) {
    return std::string(reinterpret_cast<const char*>(start), length);
  };
  const auto persistent_id = [&](const ValuePtr& id) {
    if (id->kind != Value::kTuple || id->items.size() < 5 || id->items[0]->kind != Value::kStr ||
        id->items[0]->text != "storage") {
      return;  // not a storage: LibTorch refuses it by itself
    }
    const auto item_size = storage_item_size(*id->items[1]);
    if (item_size == 0) fail("names a storage of unknown type");
    if (id->items[2]->kind != Value::kStr || id->items[4]->kind != Value::kInt) {
      fail("names a storage without a key or an element count");
    }
    const std::int64_t numel = id->items[4]->integer;
    if (numel < 0) fail("gives storage " + id->items[2]->text + " a negative element count");
    if (numel == 0) return;  // LibTorch reads no record for it
    const auto record = records.find(tensor_dir + id->items[2]->text);
    if (record == records.end())
      fail("names storage record " + tensor_dir + id->items[2]->text + ", which is missing");
    if (static_cast<std::uint64_t>(numel) > record->second.size / item_size) {
      fail("gives storage " + tensor_dir + id->items[2]->text + " " + std::to_string(numel) +
           " elements of " + std::to_string(item_size) + " bytes; its record holds " +
           std::to_string(record->second.size) + " bytes");
    }
  };
  while (true) {
    if (pos >= size) refuse(name + ": ends at byte " + std::to_string(size) + " without STOP");
    at = pos;
    op = static_cast<char>(bytes[pos++]);
    switch (op) {
      case '\x80':  // PROTO
        take(1);
        break;
      case '\x95':  // FRAME
        take(8);
        break;
      case '.':  // STOP
        return;
      case '(':  // MARK
        marks.push_back(stack.size());
        break;
      case '0':  // POP: pops the mark itself when nothing is above it, as CPython does
        if (!marks.empty() && stack.size() == marks.back()) {
          marks.pop_back();
        } else {
          pop();
        }
        break;
      case '1':  // POP_MARK
        pop_mark();
        break;
      case '2': {  // DUP
        auto top = pop();
        stack.push_back(top);
        stack.push_back(top);
        break;
      }
      case 'I': {  // INT (text; "00"/"01" are booleans)
        const std::string text = line();
        char* end = nullptr;
        const long long integer = std::strtoll(text.c_str(), &end, 10);
        stack.push_back(end != text.c_str() && *end == '\0' ? make_int(integer) : other());
        break;
      }
      case 'J':  // BININT
        stack.push_back(make_int(static_cast<std::int32_t>(le(take(4), 4))));
        break;
      case 'K':  // BININT1
        stack.push_back(make_int(static_cast<std::int64_t>(le(take(1), 1))));
        break;
      case 'M':  // BININT2
        stack.push_back(make_int(static_cast<std::int64_t>(le(take(2), 2))));
        break;
      case '\x8a': {  // LONG1: little-endian two's complement
        const std::uint64_t length = le(take(1), 1);
        const auto* start = take(length);
        if (length == 0 || length > 8) {
          stack.push_back(length == 0 ? make_int(0) : other());
          break;
        }
        std::uint64_t raw = le(start, static_cast<int>(length));
        if (length < 8 && (start[length - 1] & 0x80)) raw |= ~std::uint64_t{0} << (8 * length);
        stack.push_back(make_int(static_cast<std::int64_t>(raw)));
        break;
      }
      case '\x8b':  // LONG4
        take_len(4);
        stack.push_back(other());
        break;
      case 'L':  // LONG, FLOAT, STRING
      case 'F':
      case 'S':
        line();
        stack.push_back(other());
        break;
      case 'V':  // UNICODE
        stack.push_back(make_text(Value::kStr, line()));
        break;
      case 'T':  // BINSTRING, BINBYTES
      case 'B':
        take_len(4);
        stack.push_back(other());
        break;
      case 'U':  // SHORT_BINSTRING, SHORT_BINBYTES
      case 'C':
        take_len(1);
        stack.push_back(other());
        break;
      case '\x8e':  // BINBYTES8, BYTEARRAY8
      case '\x96':
        take_len(8);
        stack.push_back(other());
        break;
      case 'X':
      case '\x8c':
      case '\x8d': {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
        const int width = op == 'X' ? 4 : op == '\x8c' ? 1 : 8;
        const std::uint64_t length = take_len(width);
        stack.push_back(make_text(Value::kStr, text_of(bytes + pos - length, length)));
        break;
      }
      case 'G':  // BINFLOAT
        take(8);
        stack.push_back(other());
        break;
      case 'N':
      case '\x88':
      case '\x89':  // NONE, NEWTRUE, NEWFALSE
      case ']':
      case '}':
      case '\x8f':  // EMPTY_LIST, EMPTY_DICT, EMPTY_SET
      case '\x97':  // NEXT_BUFFER
        stack.push_back(other());
        break;
      case '\x82':  // EXT1
        take(1);
        stack.push_back(other());
        break;
      case '\x83':  // EXT2
        take(2);
        stack.push_back(other());
        break;
      case '\x84':  // EXT4
        take(4);
        stack.push_back(other());
        break;
      case ')':  // EMPTY_TUPLE
        tuple({});
        break;
      case 't':  // TUPLE
        tuple(pop_mark());
        break;
      case '\x85':
      case '\x86':
      case '\x87': {  // TUPLE1, TUPLE2, TUPLE3
        std::vector<ValuePtr> items(static_cast<std::size_t>(op - '\x84'));
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        tuple(std::move(items));
        break;
      }
      case 'a':  // APPEND
        pop();
        break;
      case 's':  // SETITEM
        pop();
        pop();
        break;
      case 'e':  // APPENDS, SETITEMS, ADDITEMS
      case 'u':
      case '\x90':
        pop_mark();
        break;
      case 'l':  // LIST, DICT, FROZENSET
      case 'd':
      case '\x91':
        pop_mark();
        stack.push_back(other());
        break;
      case 'g':  // GET
        get(std::strtoull(line().c_str(), nullptr, 10));
        break;
      case 'h':  // BINGET
        get(le(take(1), 1));
        break;
      case 'j':  // LONG_BINGET
        get(le(take(4), 4));
        break;
      case 'p':  // PUT
        put(std::strtoull(line().c_str(), nullptr, 10));
        break;
      case 'q':  // BINPUT
        put(le(take(1), 1));
        break;
      case 'r':  // LONG_BINPUT
        put(le(take(4), 4));
        break;
      case '\x94':  // MEMOIZE
        put(memo.size());
        break;
      case 'c': {  // GLOBAL
        std::string module = line();
        stack.push_back(make_text(Value::kGlobal, module + " " + line()));
        break;
      }
      case '\x93': {  // STACK_GLOBAL
        const auto global_name = pop();
        const auto module = pop();
        stack.push_back(make_text(Value::kGlobal, module->text + " " + global_name->text));
        break;
      }
      case 'R':  // REDUCE, NEWOBJ
      case '\x81':
        pop();
        pop();
        stack.push_back(other());
        break;
      case '\x92':  // NEWOBJ_EX
        pop();
        pop();
        pop();
        stack.push_back(other());
        break;
      case 'b':  // BUILD
        pop();
        break;
      case 'i':  // INST
        line();
        line();
        pop_mark();
        stack.push_back(other());
        break;
      case 'o':  // OBJ
        pop_mark();
        stack.push_back(other());
        break;
      case 'P':  // PERSID
        line();
        stack.push_back(other());
        break;
      case 'Q':  // BINPERSID
        persistent_id(pop());
        stack.push_back(other());
        break;
      case '\x98':  // READONLY_BUFFER
        break;
      default:
        fail("is not a pickle opcode");
    }
  }
}

}  // namespace archive_detail

// The central directory of the zip in `in` (positions from the stream's start), every record
// checked against the file's size (see the Note). Keys drop the archive's top folder, as
// PyTorchStreamReader's names do ("archive/data.pkl" -> "data.pkl"). Throws std::runtime_error
// saying what is wrong.
inline std::map<std::string, ZipRecord> zip_records(std::istream& in) {
  using archive_detail::le;
  using archive_detail::read_at;
  using archive_detail::refuse;
  in.clear();
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  if (end < 0) refuse("its size cannot be read");
  const auto file_size = static_cast<std::uint64_t>(end);
  // The end-of-central-directory record: 22 bytes and a comment of at most 65,535.
  constexpr std::uint64_t kEocd = 22;
  if (file_size < kEocd) refuse("it is too short to be a zip archive");
  const std::uint64_t tail_size = std::min<std::uint64_t>(file_size, kEocd + 65535);
  const std::string tail = read_at(in, file_size - tail_size, tail_size);
  const auto* t = reinterpret_cast<const unsigned char*>(tail.data());
  std::int64_t eocd = -1;
  for (std::int64_t i = static_cast<std::int64_t>(tail_size - kEocd); i >= 0; --i) {
    if (le(t + i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) refuse("it is not a zip archive (no end of central directory)");
  std::uint64_t entries = le(t + eocd + 10, 2);
  std::uint64_t directory_size = le(t + eocd + 12, 4);
  std::uint64_t directory_offset = le(t + eocd + 16, 4);
  const std::uint64_t eocd_at = file_size - tail_size + static_cast<std::uint64_t>(eocd);
  if (entries == 0xFFFF || directory_size == 0xFFFFFFFF || directory_offset == 0xFFFFFFFF) {
    // Zip64: a 20-byte locator before the record points at the 56-byte zip64 record.
    if (eocd_at < 20) refuse("its zip64 locator is missing");
    const std::string locator = read_at(in, eocd_at - 20, 20);
    const auto* l = reinterpret_cast<const unsigned char*>(locator.data());
    if (le(l, 4) != 0x07064b50) refuse("its zip64 locator is missing");
    const std::uint64_t record_at = le(l + 8, 8);
    if (record_at > file_size || file_size - record_at < 56)
      refuse("its zip64 directory record lies outside the file");
    const std::string record = read_at(in, record_at, 56);
    const auto* r = reinterpret_cast<const unsigned char*>(record.data());
    if (le(r, 4) != 0x06064b50) refuse("its zip64 directory record is corrupt");
    entries = le(r + 32, 8);
    directory_size = le(r + 40, 8);
    directory_offset = le(r + 48, 8);
  }
  if (directory_offset > eocd_at || directory_size > eocd_at - directory_offset) {
    refuse("its central directory lies outside the file");
  }
  constexpr std::uint64_t kEntry = 46;
  if (entries > directory_size / kEntry) refuse("its central directory claims more records than it holds");
  const std::string directory = read_at(in, directory_offset, directory_size);
  const auto* d = reinterpret_cast<const unsigned char*>(directory.data());
  std::map<std::string, ZipRecord> records;
  std::uint64_t pos = 0;
  for (std::uint64_t i = 0; i < entries; ++i) {
    if (directory_size - pos < kEntry || le(d + pos, 4) != 0x02014b50)
      refuse("its central directory is corrupt");
    const std::uint64_t name_length = le(d + pos + 28, 2);
    const std::uint64_t extra_length = le(d + pos + 30, 2);
    const std::uint64_t comment_length = le(d + pos + 32, 2);
    if (directory_size - pos - kEntry < name_length + extra_length + comment_length) {
      refuse("its central directory is corrupt");
    }
    std::string name(reinterpret_cast<const char*>(d + pos + kEntry), name_length);
    ZipRecord record;
    record.method = static_cast<std::uint16_t>(le(d + pos + 10, 2));
    record.compressed = le(d + pos + 20, 4);
    record.size = le(d + pos + 24, 4);
    record.offset = le(d + pos + 42, 4);
    // Zip64 sizes: the extra field 0x0001 holds, in this order, those given as 0xFFFFFFFF.
    const auto* extra = d + pos + kEntry + name_length;
    for (std::uint64_t e = 0; e + 4 <= extra_length;) {
      const std::uint64_t id = le(extra + e, 2);
      const std::uint64_t length = le(extra + e + 2, 2);
      if (e + 4 + length > extra_length) refuse("record " + name + " has a corrupt extra field");
      if (id == 0x0001) {
        std::uint64_t field = e + 4;
        for (auto* value : {&record.size, &record.compressed, &record.offset}) {
          if (*value != 0xFFFFFFFF) continue;
          if (field + 8 > e + 4 + length) refuse("record " + name + " has a corrupt zip64 field");
          *value = le(extra + field, 8);
          field += 8;
        }
      }
      e += 4 + length;
    }
    if (record.method != 0 && record.method != 8) {
      refuse("record " + name + " uses compression method " + std::to_string(record.method) +
             " (LibTorch archives store records, or deflate them)");
    }
    constexpr std::uint64_t kLocalHeader = 30;
    if (record.offset > directory_offset || record.compressed > directory_offset - record.offset ||
        directory_offset - record.offset - record.compressed < kLocalHeader) {
      refuse("record " + name + " lies outside the file");
    }
    // Deflate's largest ratio is 1032:1 (a 258-byte match in 2 bits, zlib's technical details).
    if (record.method == 0 ? record.size != record.compressed
                           : record.size > record.compressed * 1032 + 1024) {
      refuse("record " + name + " claims " + std::to_string(record.size) + " bytes from " +
             std::to_string(record.compressed) + " stored");
    }
    const auto slash = name.find('/');
    records[slash == std::string::npos ? name : name.substr(slash + 1)] = record;
    pos += kEntry + name_length + extra_length + comment_length;
  }
  return records;
}

// Checks the LibTorch archive in `in` (Note [Checking an archive before LibTorch reads it]):
// its zip directory, then every pickle in it. Leaves `in` at its start. Throws std::runtime_error
// saying what is wrong, for the caller to prefix with the file's name.
inline void check_archive(std::istream& in) {
  const auto records = zip_records(in);
  in.clear();
  in.seekg(0);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  for (const auto& [name, record] : records) {
    const bool pickle = name.size() > 4 && name.compare(name.size() - 4, 4, ".pkl") == 0;
    const bool debug_pickle = name.size() > 10 && name.compare(name.size() - 10, 10, ".debug_pkl") == 0;
    if (!pickle && !debug_pickle) continue;
    auto [data, size] = reader.getRecord(name);
    const std::string tensor_dir = pickle ? name.substr(0, name.size() - 4) + "/" : std::string();
    archive_detail::check_pickle(name, std::string(static_cast<const char*>(data.get()), size), tensor_dir,
                                 records);
  }
  in.clear();
  in.seekg(0);
}

}  // namespace dtrain::util
