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
// with util::PickleDecoder (Note [One pickle decoder]; protocols 0 to 5): every length within the
// bytes that remain, the pickle ending at STOP, and with a small model of the stack (ints,
// strings, globals, tuples, the memo) every persistent id's numel * itemsize within its record.
// A file that fails is refused with what and where ("data.pkl: opcode 0x58 at byte 26 claims
// 2147483651 bytes; 280 remain"). What LibTorch checks itself (an unknown global, a tensor's sizes
// against its storage, the protocol) is left to it.
#pragma once

#include <c10/core/ScalarType.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <istream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtrain/util/PickleDecoder.h"

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

  ~Value() { release_items(items); }  // Note [One pickle decoder]: nested as deep as the pickle is long
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

// Walks one pickle (see the Note) with util::PickleDecoder, keeping the small model of its stack the
// checks need. `records` maps a record's name (without the archive's top folder) to its size;
// `tensor_dir` is where this pickle's storages live ("data/").
class PickleCheck {
 public:
  PickleCheck(const std::string& name, const std::string& pickle, const std::string& tensor_dir,
              const std::map<std::string, ZipRecord>& records)
      : name_(name),
        tensor_dir_(tensor_dir),
        records_(records),
        input_(pickle),
        decoder_(input_, pickle.size()) {}

  void run() {
    while (true) {
      if (decoder_.at_end())
        refuse(name_ + ": ends at byte " + std::to_string(decoder_.size()) + " without STOP");
      const PickleOp& op = decoder_.next();
      if (op.opcode == nullptr) fail("is not a pickle opcode");
      if (op.code == '.') return;  // STOP
      PickleArg arg;
      try {
        arg = decoder_.argument();
      } catch (const PickleDecodeError& e) {
        fail(what_failed(e));
      }
      if (!step_stack(static_cast<char>(op.code))) step_value(static_cast<char>(op.code), arg);
    }
  }

 private:
  // What the decoder found, as this check words it (no limits are set beyond the protocol's).
  static std::string what_failed(const PickleDecodeError& e) {
    if (e.kind == PickleDecodeError::negative_length) return "has a negative length";
    if (e.part == PicklePart::line) return "has no end of line";
    return "claims " + std::to_string(e.claimed) + " bytes; " + std::to_string(e.remaining) + " remain";
  }

  [[noreturn]] void fail(const std::string& what) const {
    const auto op = decoder_.op().code;
    refuse(name_ + ": opcode 0x" + "0123456789abcdef"[(op >> 4) & 15] + "0123456789abcdef"[op & 15] +
           " at byte " + std::to_string(decoder_.op().at) + " " + what);
  }

  ValuePtr pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("pops an empty stack");
    auto value = stack_.back();
    stack_.pop_back();
    return value;
  }

  std::vector<ValuePtr> pop_mark() {
    if (marks_.empty()) fail("needs a MARK that is not there");
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }

  void push_tuple(std::vector<ValuePtr> items) {
    auto value = std::make_shared<Value>();
    value->kind = Value::kTuple;
    value->items = std::move(items);
    stack_.push_back(std::move(value));
  }

  void get(std::uint64_t id) {
    const auto found = memo_.find(id);
    if (found == memo_.end()) fail("reads memo " + std::to_string(id) + " before it is set");
    stack_.push_back(found->second);
  }

  void put(std::uint64_t id) {
    if (stack_.empty()) fail("memoizes an empty stack");
    memo_[id] = stack_.back();
  }

  void persistent_id(const ValuePtr& id) {
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
    const std::string key = tensor_dir_ + id->items[2]->text;
    if (numel < 0) fail("gives storage " + id->items[2]->text + " a negative element count");
    if (numel == 0) return;  // LibTorch reads no record for it
    const auto record = records_.find(key);
    if (record == records_.end()) fail("names storage record " + key + ", which is missing");
    if (static_cast<std::uint64_t>(numel) > record->second.size / item_size) {
      fail("gives storage " + key + " " + std::to_string(numel) + " elements of " +
           std::to_string(item_size) + " bytes; its record holds " + std::to_string(record->second.size) +
           " bytes");
    }
  }

  // Marks, tuples, containers and calls: what only moves values on the stack. False for others.
  bool step_stack(char op) {
    switch (op) {
      case '(':  // MARK
        marks_.push_back(stack_.size());
        return true;
      case '0':  // POP: pops the mark itself when nothing is above it, as CPython does
        if (!marks_.empty() && stack_.size() == marks_.back()) {
          marks_.pop_back();
        } else {
          pop();
        }
        return true;
      case '1':  // POP_MARK
        pop_mark();
        return true;
      case '2': {  // DUP
        auto top = pop();
        stack_.push_back(top);
        stack_.push_back(top);
        return true;
      }
      case ')':  // EMPTY_TUPLE
        push_tuple({});
        return true;
      case 't':  // TUPLE
        push_tuple(pop_mark());
        return true;
      case '\x85':
      case '\x86':
      case '\x87': {  // TUPLE1, TUPLE2, TUPLE3
        std::vector<ValuePtr> items(static_cast<std::size_t>(op - '\x84'));
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        push_tuple(std::move(items));
        return true;
      }
      case 'a':  // APPEND, BUILD
      case 'b':
        pop();
        return true;
      case 's':  // SETITEM
        pop();
        pop();
        return true;
      case 'e':  // APPENDS, SETITEMS, ADDITEMS
      case 'u':
      case '\x90':
        pop_mark();
        return true;
      case 'l':  // LIST, DICT, FROZENSET, INST, OBJ
      case 'd':
      case '\x91':
      case 'i':
      case 'o':
        pop_mark();
        stack_.push_back(other());
        return true;
      case 'R':  // REDUCE, NEWOBJ
      case '\x81':
        pop();
        pop();
        stack_.push_back(other());
        return true;
      case '\x92':  // NEWOBJ_EX
        pop();
        pop();
        pop();
        stack_.push_back(other());
        return true;
      default:
        return false;
    }
  }

  // Opcodes that push a value (or set the protocol, a frame, the memo), their argument read.
  void step_value(char op, const PickleArg& arg) {
    switch (op) {
      case '\x80':  // PROTO, FRAME, READONLY_BUFFER
      case '\x95':
      case '\x98':
        return;
      case 'I': {  // INT (text; "00"/"01" are booleans)
        char* end = nullptr;
        const long long integer = std::strtoll(arg.text.c_str(), &end, 10);
        stack_.push_back(end != arg.text.c_str() && *end == '\0' ? make_int(integer) : other());
        return;
      }
      case 'J':  // BININT
        return stack_.push_back(make_int(static_cast<std::int32_t>(arg.number)));
      case 'K':  // BININT1, BININT2
      case 'M':
        return stack_.push_back(make_int(static_cast<std::int64_t>(arg.number)));
      case '\x8a':  // LONG1: beyond 64 bits, no count the checks need
        return stack_.push_back(arg.fits ? make_int(static_cast<std::int64_t>(arg.number)) : other());
      case 'V':  // UNICODE, BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
      case 'X':
      case '\x8c':
      case '\x8d':
        return stack_.push_back(make_text(Value::kStr, arg.text));
      case 'g':  // GET, BINGET, LONG_BINGET
        return get(std::strtoull(arg.text.c_str(), nullptr, 10));
      case 'h':
      case 'j':
        return get(arg.number);
      case 'p':  // PUT, BINPUT, LONG_BINPUT, MEMOIZE
        return put(std::strtoull(arg.text.c_str(), nullptr, 10));
      case 'q':
      case 'r':
        return put(arg.number);
      case '\x94':
        return put(memo_.size());
      case 'c':  // GLOBAL
        return stack_.push_back(make_text(Value::kGlobal, arg.text + " " + arg.name));
      case '\x93': {  // STACK_GLOBAL
        const auto global_name = pop();
        const auto module = pop();
        return stack_.push_back(make_text(Value::kGlobal, module->text + " " + global_name->text));
      }
      case 'Q':  // BINPERSID
        persistent_id(pop());
        return stack_.push_back(other());
      default:  // every other opcode pushes a value the checks need not know
        return stack_.push_back(other());
    }
  }

  const std::string& name_;
  const std::string& tensor_dir_;
  const std::map<std::string, ZipRecord>& records_;
  PickleMemoryInput input_;
  PickleDecoder decoder_;
  std::vector<ValuePtr> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, ValuePtr> memo_;
};

inline void check_pickle(const std::string& name, const std::string& pickle, const std::string& tensor_dir,
                         const std::map<std::string, ZipRecord>& records) {
  PickleCheck(name, pickle, tensor_dir, records).run();
}

}  // namespace archive_detail

namespace archive_detail {

// Where the central directory is, from the end-of-central-directory record (and zip64's).
struct ZipDirectory {
  std::uint64_t entries = 0;
  std::uint64_t size = 0;
  std::uint64_t offset = 0;
};

inline ZipDirectory zip_directory(std::istream& in) {
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
  ZipDirectory directory{le(t + eocd + 10, 2), le(t + eocd + 12, 4), le(t + eocd + 16, 4)};
  const std::uint64_t eocd_at = file_size - tail_size + static_cast<std::uint64_t>(eocd);
  if (directory.entries == 0xFFFF || directory.size == 0xFFFFFFFF || directory.offset == 0xFFFFFFFF) {
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
    directory = {le(r + 32, 8), le(r + 40, 8), le(r + 48, 8)};
  }
  if (directory.offset > eocd_at || directory.size > eocd_at - directory.offset) {
    refuse("its central directory lies outside the file");
  }
  return directory;
}

// The record of central-directory entry `entry` named `name` (its extra field `extra_length` bytes
// long), checked against the file: every record lies before the directory at `directory_offset`.
inline ZipRecord zip_record(const unsigned char* entry, const std::string& name, std::uint64_t extra_length,
                            std::uint64_t directory_offset) {
  constexpr std::uint64_t kEntry = 46;
  ZipRecord record;
  record.method = static_cast<std::uint16_t>(le(entry + 10, 2));
  record.compressed = le(entry + 20, 4);
  record.size = le(entry + 24, 4);
  record.offset = le(entry + 42, 4);
  // Zip64 sizes: the extra field 0x0001 holds, in this order, those given as 0xFFFFFFFF.
  const auto* extra = entry + kEntry + name.size();
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
  if (record.method == 0 ? record.size != record.compressed : record.size > record.compressed * 1032 + 1024) {
    refuse("record " + name + " claims " + std::to_string(record.size) + " bytes from " +
           std::to_string(record.compressed) + " stored");
  }
  return record;
}

}  // namespace archive_detail

// The central directory of the zip in `in` (positions from the stream's start), every record
// checked against the file's size (see the Note). Keys drop the archive's top folder, as
// PyTorchStreamReader's names do ("archive/data.pkl" -> "data.pkl"). Throws std::runtime_error
// saying what is wrong.
inline std::map<std::string, ZipRecord> zip_records(std::istream& in) {
  using archive_detail::le;
  using archive_detail::refuse;
  const auto directory_at = archive_detail::zip_directory(in);
  constexpr std::uint64_t kEntry = 46;
  if (directory_at.entries > directory_at.size / kEntry) {
    refuse("its central directory claims more records than it holds");
  }
  const std::string directory = archive_detail::read_at(in, directory_at.offset, directory_at.size);
  const auto* d = reinterpret_cast<const unsigned char*>(directory.data());
  std::map<std::string, ZipRecord> records;
  std::uint64_t pos = 0;
  for (std::uint64_t i = 0; i < directory_at.entries; ++i) {
    if (directory_at.size - pos < kEntry || le(d + pos, 4) != 0x02014b50)
      refuse("its central directory is corrupt");
    const std::uint64_t name_length = le(d + pos + 28, 2);
    const std::uint64_t extra_length = le(d + pos + 30, 2);
    const std::uint64_t comment_length = le(d + pos + 32, 2);
    if (directory_at.size - pos - kEntry < name_length + extra_length + comment_length) {
      refuse("its central directory is corrupt");
    }
    const std::string name(reinterpret_cast<const char*>(d + pos + kEntry), name_length);
    const auto slash = name.find('/');
    records[slash == std::string::npos ? name : name.substr(slash + 1)] =
        archive_detail::zip_record(d + pos, name, extra_length, directory_at.offset);
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
