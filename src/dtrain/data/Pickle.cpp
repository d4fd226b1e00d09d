// The strict pickle reader: a stack machine over util::PickleDecoder's opcodes that builds the
// values of downsampled ImageNet's batch files; see Pickle.h.
//
// Note [Downsampled ImageNet pickles]
// Chrabaszcz, Loshchilov and Hutter's Imagenet32/64 files (PatrykChrabaszcz/Imagenet32_Scripts,
// image2numpy_imagenet_{train,val}.py) are Python 3 `pickle.dump(d, f)` of a dict
// {'data': uint8 ndarray (N, 3*S*S), channel-planar R, G, B like CIFAR; 'labels': list of ints
// 1..1000; 'mean': float64 ndarray (3*S*S), training batches only}. Python 3.0-3.7 writes
// protocol 3, 3.8+ protocol 4 (FRAME, SHORT_BINUNICODE, STACK_GLOBAL, MEMOIZE); numpy reduces an
// array to numpy.core.multiarray._reconstruct(ndarray, (0,), b'b') followed by BUILD with the
// state (1, shape, dtype, fortran_order, raw bytes), and a dtype to numpy.dtype('u1', False,
// True) with BUILD (3, '|', None, None, None, -1, -1, 0). Protocol 5 writes arrays as
// numpy.core.numeric._frombuffer(bytearray, dtype, shape, order); Python 3's protocol 2 writes
// bytes as _codecs.encode(text, 'latin1'); Python 2's as a str (BINSTRING). numpy 2 moved
// numpy.core to numpy._core. This reader is a stack machine for exactly those opcodes and
// globals, which is all such a file needs; unlike Python's unpickler it calls nothing, so a
// hostile file can at worst be refused. Every length is checked against the bytes left in the
// file before anything is allocated or skipped (Note [One pickle decoder]), and raw bytes are not
// read while parsing (see PickleBytes): the caller copies an array's data straight into its tensor.
#include "dtrain/data/Pickle.h"

#include <c10/util/Exception.h>

#include "dtrain/util/PickleDecoder.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

namespace dtrain::data {

namespace {

using Kind = PickleValue::Kind;

std::string hex_byte(std::uint8_t b) {
  const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

PickleRef make(Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

// Python 3's protocol 2 stores bytes as text whose code points are the byte values.
bool latin1_from_utf8(const std::string& utf8, std::string& out) {
  out.clear();
  out.reserve(utf8.size());
  for (std::size_t i = 0; i < utf8.size(); ++i) {
    const auto c = static_cast<std::uint8_t>(utf8[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c == 0xc2 || c == 0xc3) && i + 1 < utf8.size()) {
      const auto next = static_cast<std::uint8_t>(utf8[++i]);
      if ((next & 0xc0) != 0x80) return false;
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (next & 0x3f)));
    } else {
      return false;
    }
  }
  return true;
}

// The batch file at `path`, given to util::PickleDecoder a byte at a time through a 1 MB buffer;
// long runs of bytes are skipped with a seek (Note [One pickle decoder]).
class FileInput final : public util::PickleInput {
 public:
  explicit FileInput(const std::string& path) : path_(path) {
    buffer_.resize(1 << 20);
    in_.rdbuf()->pubsetbuf(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    in_.open(path_, std::ios::binary);
    TORCH_CHECK(in_, path_, ": cannot open for reading");
    std::error_code ec;
    size_ = static_cast<std::int64_t>(std::filesystem::file_size(path_, ec));
    TORCH_CHECK(!ec, path_, ": cannot read its size (", ec.message(), ")");
    TORCH_CHECK(size_ > 0, path_, ": empty: expected a pickled Python dictionary");
  }

  std::int64_t size() const { return size_; }

  std::uint8_t byte(std::uint64_t at) override {
    const int c = in_.get();
    TORCH_CHECK(c != EOF, path_, ": cannot read byte ", at);
    return static_cast<std::uint8_t>(c);
  }

  void read(std::uint64_t at, char* out, std::uint64_t count) override {
    const auto n = static_cast<std::streamsize>(count);
    in_.read(out, n);
    TORCH_CHECK(in_.gcount() == n, path_, ": cannot read bytes ", at, "..", at + count);
  }

  void skip(std::uint64_t at, std::uint64_t count) override {
    in_.seekg(static_cast<std::streamoff>(count), std::ios::cur);
    TORCH_CHECK(in_, path_, ": cannot seek past bytes ", at, "..", at + count);
  }

 private:
  const std::string& path_;
  std::vector<char> buffer_;
  std::ifstream in_;
  std::int64_t size_ = 0;
};

// What these files hold beyond the protocol: GLOBAL's lines are short, integers fit 64 bits.
util::PickleLimits batch_file_limits() {
  util::PickleLimits limits;
  limits.line = 256;
  limits.long1 = 8;
  return limits;
}

class Parser {
 public:
  explicit Parser(std::string path)
      : path_(std::move(path)),
        input_(path_),
        size_(input_.size()),
        decoder_(input_, static_cast<std::uint64_t>(size_), batch_file_limits()) {}

  PickleRef run() {
    while (true) {
      if (decoder_.at_end()) {
        TORCH_CHECK(false, path_, ": truncated pickle: the file ends at byte ", size_,
                    " before the STOP opcode; the file is incomplete (download or unpack it again)");
      }
      const std::uint8_t op = decoder_.next().code;
      // Protocols 2 to 5 open with PROTO; older ones (text opcodes) are not what Python 3 writes.
      if (op_at() == 0 && op != 0x80) {
        const std::string name = util::pickle_opcode_name(op);
        fail("not a pickle of protocol 2 to 5 (it starts with byte " + hex_byte(op) +
             (name.empty() ? std::string() : " (" + name + ")") + ", not 0x80 PROTO)");
      }
      if (op == '.') break;
      if (!step_container(op) && !step_call(op) && !step_value(op)) refuse_opcode(op);
    }
    if (stack_.size() != 1 || !marks_.empty())
      fail("STOP leaves a malformed stack: not a pickle this reader reads");
    const auto end = static_cast<std::int64_t>(decoder_.position());
    TORCH_CHECK(end == size_, path_, ": ", size_ - end, " bytes follow the pickle's STOP opcode at byte ",
                op_at(), "; the file is not one pickle");
    return stack_.back();
  }

 private:
  std::int64_t op_at() const { return static_cast<std::int64_t>(decoder_.op().at); }

  [[noreturn]] void fail(const std::string& what) const {
    TORCH_CHECK(false, path_, ": at byte ", op_at(), ": ", what);
    TORCH_INTERNAL_ASSERT(false);
  }

  [[noreturn]] void refuse_opcode(std::uint8_t op) const {
    const std::string name = util::pickle_opcode_name(op);
    fail("opcode " + hex_byte(op) + (name.empty() ? " (not a pickle opcode)" : " (" + name + ")") +
         " is not one this reader understands (it reads numpy arrays, lists, ints and strings only)");
  }

  // The message for what the decoder found (Note [One pickle decoder]).
  [[noreturn]] void refuse(const util::PickleDecodeError& e) const {
    using Error = util::PickleDecodeError;
    const std::string name = util::pickle_opcode_name(decoder_.op().code);
    if (e.kind == Error::negative_length) fail(name + " with a negative length");
    if (e.kind == Error::long_too_wide)
      fail(name + " of " + std::to_string(e.claimed) + " bytes: an integer beyond 64 bits");
    if (e.kind == Error::line_too_long)
      fail(name + ": a module or name line longer than " + std::to_string(e.claimed) + " bytes");
    const char* what = e.part == util::PicklePart::length  ? "a length"
                       : e.part == util::PicklePart::text  ? "a string"
                       : e.part == util::PicklePart::bytes ? "bytes"
                       : e.part == util::PicklePart::frame ? "a frame"
                                                           : "an opcode argument";
    TORCH_CHECK(false, path_, ": truncated pickle: at byte ", op_at(), " ", what, " of ", e.claimed,
                " bytes, but only ", e.remaining, " bytes are left in the file");
    TORCH_INTERNAL_ASSERT(false);
  }

  // The argument of the opcode being run.
  util::PickleArg argument() {
    try {
      return decoder_.argument();
    } catch (const util::PickleDecodeError& e) {
      refuse(e);
    }
  }

  // Checks that `count` bytes claimed by the opcode being run lie within the file.
  void claim(std::uint64_t count, util::PicklePart part) const {
    try {
      decoder_.claim(count, part);
    } catch (const util::PickleDecodeError& e) {
      refuse(e);
    }
  }

  // Runs of bytes up to PickleLimits::read_bytes are read (dict keys of Python 2 pickles, numpy's
  // b'b'); longer ones are left in the file, for read_pickle_bytes.
  static PickleBytes bytes_of(util::PickleArg&& arg) {
    PickleBytes b;
    b.size = static_cast<std::int64_t>(arg.size);
    if (arg.skipped) {
      b.offset = static_cast<std::int64_t>(arg.offset);
    } else {
      b.decoded = std::move(arg.text);
    }
    return b;
  }

  void push(PickleRef v) { stack_.push_back(std::move(v)); }

  PickleRef pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
      fail("a value is popped from an empty stack");
    auto v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }

  PickleRef& top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("the stack is empty");
    return stack_.back();
  }

  std::vector<PickleRef> pop_mark() {
    if (marks_.empty()) fail("no MARK to collect items from");
    const std::size_t from = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(from)),
                                 std::make_move_iterator(stack_.end()));
    stack_.resize(from);
    return items;
  }

  PickleRef tuple(std::vector<PickleRef> items) {
    auto t = make(Kind::tuple);
    t->items = std::move(items);
    return t;
  }

  void add_to_dict(PickleValue& dict, std::vector<PickleRef> pairs) {
    if (dict.kind != Kind::dict) fail("SETITEM(S) on a " + kind_name(dict) + ", not a dict");
    if (pairs.size() % 2 != 0) fail("SETITEMS with an odd number of items");
    for (auto& p : pairs) dict.items.push_back(std::move(p));
  }

  void add_to_list(PickleValue& list, std::vector<PickleRef> items) {
    if (list.kind != Kind::list) fail("APPEND(S) on a " + kind_name(list) + ", not a list");
    for (auto& p : items) list.items.push_back(std::move(p));
  }

  void memo_put(std::uint64_t index) { memo_[index] = top(); }

  void memo_get(std::uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " is read before it is written");
    push(it->second);
  }

  PickleRef global(const std::string& module, const std::string& name) {
    // numpy 2 renamed numpy.core to numpy._core; pickles name either.
    std::string m = module;
    if (m.rfind("numpy._core.", 0) == 0) m = "numpy.core." + m.substr(12);
    const std::string full = m + "." + name;
    if (full != "numpy.core.multiarray._reconstruct" && full != "numpy.ndarray" && full != "numpy.dtype" &&
        full != "numpy.core.numeric._frombuffer" && full != "_codecs.encode") {
      fail("global " + module + "." + name +
           " is not one this reader knows (it reads numpy arrays, lists, ints and strings only)");
    }
    auto g = make(Kind::global);
    g->text = full;
    return g;
  }

  static bool is(const PickleRef& v, Kind k) { return v && v->kind == k; }

  // Python 2 pickles write numpy's type strings as str, read here as short (decoded) bytes.
  static bool is_text(const PickleRef& v) {
    return is(v, Kind::text) || (is(v, Kind::bytes) && v->bytes.offset < 0);
  }
  static const std::string& text_of(const PickleRef& v) {
    return v->kind == Kind::text ? v->text : v->bytes.decoded;
  }

  std::vector<std::int64_t> shape_of(const PickleRef& v) {
    if (!is(v, Kind::tuple)) fail("a numpy array's shape is a " + kind_name(*v) + ", not a tuple");
    std::vector<std::int64_t> shape;
    for (const auto& d : v->items) {
      if (!is(d, Kind::integer) || d->integer < 0)
        fail("a numpy array's shape holds something other than sizes >= 0");
      shape.push_back(d->integer);
    }
    return shape;
  }

  // An array's data must be exactly its shape's elements times the dtype's size.
  void check_array(const PickleValue& a) {
    const std::int64_t item = a.item_size();
    if (item <= 0) fail("numpy dtype '" + a.dtype->text + "' is not a number type this reader reads");
    std::int64_t elements = 1;
    for (const auto d : a.shape) {
      if (d > 0 && elements > (size_ / item) / d + 1)
        fail("a numpy array's shape promises more data than the file holds");
      elements *= d;
    }
    if (elements * item != a.bytes.size) {
      fail("a numpy array of " + std::to_string(elements) + " elements of " + std::to_string(item) +
           " bytes holds " + std::to_string(a.bytes.size) + " bytes of data");
    }
  }

  PickleRef reduce(const PickleRef& callable, const PickleRef& args) {
    if (!is(callable, Kind::global)) fail("REDUCE calls a " + kind_name(*callable) + ", not a known global");
    if (!is(args, Kind::tuple)) fail("REDUCE's arguments are a " + kind_name(*args) + ", not a tuple");
    const auto& a = args->items;
    const std::string& f = callable->text;
    if (f == "numpy.core.multiarray._reconstruct") {
      if (a.size() != 3 || !is(a[0], Kind::global) || a[0]->text != "numpy.ndarray") {
        fail("numpy's _reconstruct is called with other arguments than (numpy.ndarray, shape, typecode)");
      }
      return make(Kind::array);  // shape, dtype and data come with BUILD
    }
    if (f == "numpy.dtype") {
      if (a.empty() || !is_text(a[0])) fail("numpy.dtype is called without a type string");
      auto d = make(Kind::dtype);
      d->text = text_of(a[0]);
      return d;
    }
    if (f == "numpy.core.numeric._frombuffer") {
      if (a.size() != 4 || !is(a[0], Kind::bytes) || !is(a[1], Kind::dtype) || !is(a[3], Kind::text)) {
        fail("numpy's _frombuffer is called with other arguments than (buffer, dtype, shape, order)");
      }
      auto arr = make(Kind::array);
      arr->bytes = a[0]->bytes;
      arr->dtype = a[1];
      arr->shape = shape_of(a[2]);
      if (a[3]->text != "C" && a[3]->text != "F") fail("numpy's _frombuffer with order '" + a[3]->text + "'");
      arr->fortran_order = a[3]->text == "F";
      arr->built = true;
      check_array(*arr);
      return arr;
    }
    if (f == "_codecs.encode") {
      if (a.size() != 2 || !is(a[0], Kind::text) || !is(a[1], Kind::text) ||
          (a[1]->text != "latin1" && a[1]->text != "latin-1")) {
        fail("_codecs.encode is called with other arguments than (text, 'latin1')");
      }
      auto b = make(Kind::bytes);
      if (!latin1_from_utf8(a[0]->text, b->bytes.decoded)) fail("_codecs.encode of text that is not latin-1");
      b->bytes.size = static_cast<std::int64_t>(b->bytes.decoded.size());
      return b;
    }
    fail("REDUCE of " + f + " with " + std::to_string(a.size()) + " arguments is not one this reader knows");
  }

  void build(PickleValue& obj, const PickleRef& state) {
    if (obj.built) fail("BUILD on a " + kind_name(obj) + " whose state is already set");
    if (!is(state, Kind::tuple)) fail("BUILD with a " + kind_name(*state) + " state, not a tuple");
    const auto& s = state->items;
    if (obj.kind == Kind::dtype) {
      // (version, byte order, subarray, names, fields, itemsize, alignment, flags)
      if (s.size() < 2 || !is_text(s[1]) || text_of(s[1]).size() != 1)
        fail("a numpy dtype's state has no byte order");
      obj.byte_order = text_of(s[1])[0];
      if (obj.byte_order == '=') obj.byte_order = '<';  // native, as written by a little-endian machine
      if (s.size() >= 3 && !is(s[2], Kind::none)) fail("numpy dtype '" + obj.text + "' is a sub-array type");
      obj.built = true;
      return;
    }
    if (obj.kind == Kind::array) {
      // (version, shape, dtype, is_fortran, data); numpy also accepts it without the version.
      const std::size_t o = s.size() == 5 ? 1 : 0;
      if (s.size() != 4 && s.size() != 5)
        fail("a numpy array's state is not (version, shape, dtype, fortran, data)");
      if (!is(s[o + 1], Kind::dtype) || !s[o + 1]->built) fail("a numpy array's state has no dtype");
      if (!is(s[o + 2], Kind::boolean)) fail("a numpy array's state has no order flag");
      if (!is(s[o + 3], Kind::bytes)) {
        fail("a numpy array's data is a " + kind_name(*s[o + 3]) +
             ", not bytes (an array of Python objects?)");
      }
      obj.shape = shape_of(s[o]);
      obj.dtype = s[o + 1];
      obj.fortran_order = s[o + 2]->integer != 0;
      obj.bytes = s[o + 3]->bytes;
      obj.built = true;
      check_array(obj);
      return;
    }
    fail("BUILD on a " + kind_name(obj) + "; only numpy arrays and dtypes are built");
  }

  // Marks, tuples, dicts and lists (opcodes without an argument). False for other opcodes.
  bool step_container(std::uint8_t op) {
    switch (op) {
      case '}':
        push(make(Kind::dict));
        break;
      case ']':
        push(make(Kind::list));
        break;
      case ')':
        push(make(Kind::tuple));
        break;
      case '(':
        marks_.push_back(stack_.size());
        break;
      case 't':
        push(tuple(pop_mark()));
        break;
      case 0x85:
      case 0x86:
      case 0x87: {
        std::vector<PickleRef> items(op - 0x84);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        push(tuple(std::move(items)));
        break;
      }
      case 's': {
        auto value = pop();
        auto key = pop();
        add_to_dict(*top(), {std::move(key), std::move(value)});
        break;
      }
      case 'u': {
        auto items = pop_mark();
        add_to_dict(*top(), std::move(items));
        break;
      }
      case 'a': {
        auto value = pop();
        add_to_list(*top(), {std::move(value)});
        break;
      }
      case 'e': {
        auto items = pop_mark();
        add_to_list(*top(), std::move(items));
        break;
      }
      case '0':
        (void)pop();
        break;
      case '1':
        (void)pop_mark();
        break;
      default:
        return false;
    }
    return true;
  }

  // Globals and what is called or built with them. False for other opcodes.
  bool step_call(std::uint8_t op) {
    switch (op) {
      case 'c': {
        const auto arg = argument();
        push(global(arg.text, arg.name));
        break;
      }
      case 0x93: {
        auto name = pop();
        auto module = pop();
        if (!is(module, Kind::text) || !is(name, Kind::text))
          fail("STACK_GLOBAL without a module and a name");
        push(global(module->text, name->text));
        break;
      }
      case 'R': {
        auto args = pop();
        auto callable = pop();
        push(reduce(callable, args));
        break;
      }
      case 'b': {
        auto state = pop();
        build(*top(), state);
        break;
      }
      default:
        return false;
    }
    return true;
  }

  // The protocol, frames, constants, ints, strings, bytes and the memo. False for other opcodes.
  bool step_value(std::uint8_t op) {
    switch (op) {
      case 0x80: {
        const auto protocol = argument().number;
        if (protocol < 2 || protocol > 5)
          fail("pickle protocol " + std::to_string(protocol) + "; this reader reads protocols 2 to 5");
        break;
      }
      case 0x95:  // FRAME: its length must fit the file; its bytes are the opcodes that follow
        claim(argument().number, util::PicklePart::frame);
        break;
      case 'N':
        push(make(Kind::none));
        break;
      case 0x88:
      case 0x89: {
        auto b = make(Kind::boolean);
        b->integer = op == 0x88 ? 1 : 0;
        push(std::move(b));
        break;
      }
      case 'J':
      case 'K':
      case 'M':
      case 0x8a: {  // BININT is signed; LONG1's value comes sign-extended
        const auto number = argument().number;
        auto v = make(Kind::integer);
        v->integer =
            op == 'J' ? std::int64_t{static_cast<std::int32_t>(number)} : static_cast<std::int64_t>(number);
        push(std::move(v));
        break;
      }
      case 'X':
      case 0x8c:
      case 0x8d: {
        auto t = make(Kind::text);
        t->text = argument().text;
        push(std::move(t));
        break;
      }
      case 'B':
      case 'C':
      case 0x8e:
      case 0x96:
      case 'T':
      case 'U': {
        auto b = make(Kind::bytes);
        b->bytes = bytes_of(argument());
        push(std::move(b));
        break;
      }
      case 'q':
      case 'r':
      case 0x94: {
        const auto index = op == 0x94 ? memo_.size() : argument().number;
        memo_put(index);
        break;
      }
      case 'h':
      case 'j':
        memo_get(argument().number);
        break;
      default:
        return false;
    }
    return true;
  }

  std::string path_;
  FileInput input_;
  std::int64_t size_ = 0;
  util::PickleDecoder decoder_;
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, PickleRef> memo_;
};

}  // namespace

PickleRef read_pickle(const std::string& path) {
  return Parser(path).run();
}

void read_pickle_bytes(const std::string& path, const PickleBytes& bytes, void* out) {
  if (bytes.size == 0) return;
  if (bytes.offset < 0) {
    TORCH_INTERNAL_ASSERT(static_cast<std::int64_t>(bytes.decoded.size()) == bytes.size);
    std::memcpy(out, bytes.decoded.data(), bytes.decoded.size());
    return;
  }
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, path, ": cannot open for reading");
  in.seekg(bytes.offset);
  in.read(static_cast<char*>(out), bytes.size);
  TORCH_CHECK(in.gcount() == bytes.size, path, ": truncated while reading bytes ", bytes.offset, "..",
              bytes.offset + bytes.size, " (did the file change while it was read?)");
}

}  // namespace dtrain::data
