// The strict pickle reader; see Pickle.h.
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
// file before anything is allocated or skipped, and raw bytes are not read while parsing (see
// PickleBytes): the caller copies an array's data straight into its tensor.
#include "dtrain/data/Pickle.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

namespace dtrain::data {

namespace {

using Kind = PickleValue::Kind;

std::string opcode_name(std::uint8_t op) {
  switch (op) {
    case 0x80:
      return "PROTO";
    case 0x95:
      return "FRAME";
    case '.':
      return "STOP";
    case '}':
      return "EMPTY_DICT";
    case ']':
      return "EMPTY_LIST";
    case ')':
      return "EMPTY_TUPLE";
    case '(':
      return "MARK";
    case 't':
      return "TUPLE";
    case 0x85:
      return "TUPLE1";
    case 0x86:
      return "TUPLE2";
    case 0x87:
      return "TUPLE3";
    case 's':
      return "SETITEM";
    case 'u':
      return "SETITEMS";
    case 'a':
      return "APPEND";
    case 'e':
      return "APPENDS";
    case 'N':
      return "NONE";
    case 0x88:
      return "NEWTRUE";
    case 0x89:
      return "NEWFALSE";
    case 'J':
      return "BININT";
    case 'K':
      return "BININT1";
    case 'M':
      return "BININT2";
    case 0x8a:
      return "LONG1";
    case 'X':
      return "BINUNICODE";
    case 0x8c:
      return "SHORT_BINUNICODE";
    case 0x8d:
      return "BINUNICODE8";
    case 'B':
      return "BINBYTES";
    case 'C':
      return "SHORT_BINBYTES";
    case 0x8e:
      return "BINBYTES8";
    case 0x96:
      return "BYTEARRAY8";
    case 'T':
      return "BINSTRING";
    case 'U':
      return "SHORT_BINSTRING";
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 'b':
      return "BUILD";
    case 'q':
      return "BINPUT";
    case 'r':
      return "LONG_BINPUT";
    case 0x94:
      return "MEMOIZE";
    case 'h':
      return "BINGET";
    case 'j':
      return "LONG_BINGET";
    case '0':
      return "POP";
    case '1':
      return "POP_MARK";
    // Known to Python, refused here: what they build does not occur in these files.
    case 'I':
      return "INT";
    case 'L':
      return "LONG";
    case 0x8b:
      return "LONG4";
    case 'F':
      return "FLOAT";
    case 'G':
      return "BINFLOAT";
    case 'S':
      return "STRING";
    case 'V':
      return "UNICODE";
    case 'd':
      return "DICT";
    case 'l':
      return "LIST";
    case 'p':
      return "PUT";
    case 'g':
      return "GET";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 0x81:
      return "NEWOBJ";
    case 0x92:
      return "NEWOBJ_EX";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 0x8f:
      return "EMPTY_SET";
    case 0x90:
      return "ADDITEMS";
    case 0x91:
      return "FROZENSET";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    case '2':
      return "DUP";
    default:
      return "";
  }
}

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

class Parser {
 public:
  explicit Parser(std::string path) : path_(std::move(path)) {
    buffer_.resize(1 << 20);
    in_.rdbuf()->pubsetbuf(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    in_.open(path_, std::ios::binary);
    TORCH_CHECK(in_, path_, ": cannot open for reading");
    std::error_code ec;
    size_ = static_cast<std::int64_t>(std::filesystem::file_size(path_, ec));
    TORCH_CHECK(!ec, path_, ": cannot read its size (", ec.message(), ")");
    TORCH_CHECK(size_ > 0, path_, ": empty: expected a pickled Python dictionary");
  }

  PickleRef run() {
    while (true) {
      if (pos_ >= size_) {
        TORCH_CHECK(false, path_, ": truncated pickle: the file ends at byte ", size_,
                    " before the STOP opcode; the file is incomplete (download or unpack it again)");
      }
      op_at_ = pos_;
      const std::uint8_t op = u8();
      // Protocols 2 to 5 open with PROTO; older ones (text opcodes) are not what Python 3 writes.
      if (op_at_ == 0 && op != 0x80) {
        const std::string name = opcode_name(op);
        fail("not a pickle of protocol 2 to 5 (it starts with byte " + hex_byte(op) +
             (name.empty() ? std::string() : " (" + name + ")") + ", not 0x80 PROTO)");
      }
      if (op == '.') break;
      step(op);
    }
    if (stack_.size() != 1 || !marks_.empty())
      fail("STOP leaves a malformed stack: not a pickle this reader reads");
    TORCH_CHECK(pos_ == size_, path_, ": ", size_ - pos_, " bytes follow the pickle's STOP opcode at byte ",
                op_at_, "; the file is not one pickle");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    TORCH_CHECK(false, path_, ": at byte ", op_at_, ": ", what);
    TORCH_INTERNAL_ASSERT(false);
  }

  void need(std::int64_t n, const char* what) {
    if (n < 0 || n > size_ - pos_) {
      TORCH_CHECK(false, path_, ": truncated pickle: at byte ", op_at_, " ", what, " of ", n,
                  " bytes, but only ", size_ - pos_, " bytes are left in the file");
    }
  }

  std::uint8_t u8() {
    need(1, "an opcode argument");
    const int c = in_.get();
    TORCH_CHECK(c != EOF, path_, ": cannot read byte ", pos_);
    ++pos_;
    return static_cast<std::uint8_t>(c);
  }

  std::uint64_t little_endian(int n) {
    need(n, "an opcode argument");
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t{u8()} << (8 * i);
    return v;
  }

  std::int64_t length(int n) { return checked_length(little_endian(n)); }

  std::int64_t checked_length(std::uint64_t v) {
    if (v > static_cast<std::uint64_t>(size_)) {
      TORCH_CHECK(false, path_, ": truncated pickle: at byte ", op_at_, " a length of ", v,
                  " bytes, but only ", size_ - pos_, " bytes are left in the file");
    }
    return static_cast<std::int64_t>(v);
  }

  std::string read_text(std::int64_t n) {
    need(n, "a string");
    std::string s(static_cast<std::size_t>(n), '\0');
    in_.read(s.data(), n);
    TORCH_CHECK(in_.gcount() == n, path_, ": cannot read bytes ", pos_, "..", pos_ + n);
    pos_ += n;
    return s;
  }

  // Short runs (dict keys of Python 2 pickles, numpy's b'b') are read; long ones only skipped.
  PickleBytes skip_bytes(std::int64_t n) {
    need(n, "bytes");
    PickleBytes b;
    b.size = n;
    if (n <= 256) {
      b.decoded = read_text(n);
      return b;
    }
    b.offset = pos_;
    in_.seekg(n, std::ios::cur);
    TORCH_CHECK(in_, path_, ": cannot seek past bytes ", pos_, "..", pos_ + n);
    pos_ += n;
    return b;
  }

  std::string line() {
    std::string s;
    while (true) {
      const std::uint8_t c = u8();
      if (c == '\n') return s;
      if (s.size() >= 256) fail("GLOBAL: a module or name line longer than 256 bytes");
      s.push_back(static_cast<char>(c));
    }
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

  void step(std::uint8_t op) {
    switch (op) {
      case 0x80: {
        const int protocol = u8();
        if (protocol < 2 || protocol > 5)
          fail("pickle protocol " + std::to_string(protocol) + "; this reader reads protocols 2 to 5");
        return;
      }
      case 0x95: {
        const auto n = length(8);
        need(n, "a frame");
        return;
      }
      case '}':
        return push(make(Kind::dict));
      case ']':
        return push(make(Kind::list));
      case ')':
        return push(make(Kind::tuple));
      case '(':
        marks_.push_back(stack_.size());
        return;
      case 't':
        return push(tuple(pop_mark()));
      case 0x85:
      case 0x86:
      case 0x87: {
        std::vector<PickleRef> items(op - 0x84);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        return push(tuple(std::move(items)));
      }
      case 's': {
        auto value = pop();
        auto key = pop();
        return add_to_dict(*top(), {std::move(key), std::move(value)});
      }
      case 'u': {
        auto items = pop_mark();
        return add_to_dict(*top(), std::move(items));
      }
      case 'a': {
        auto value = pop();
        return add_to_list(*top(), {std::move(value)});
      }
      case 'e': {
        auto items = pop_mark();
        return add_to_list(*top(), std::move(items));
      }
      case 'N':
        return push(make(Kind::none));
      case 0x88:
      case 0x89: {
        auto b = make(Kind::boolean);
        b->integer = op == 0x88 ? 1 : 0;
        return push(std::move(b));
      }
      case 'J':
      case 'K':
      case 'M':
      case 0x8a: {
        auto v = make(Kind::integer);
        if (op == 'J') v->integer = static_cast<std::int32_t>(little_endian(4));
        if (op == 'K') v->integer = static_cast<std::int64_t>(little_endian(1));
        if (op == 'M') v->integer = static_cast<std::int64_t>(little_endian(2));
        if (op == 0x8a) {
          const int n = u8();
          if (n > 8) fail("LONG1 of " + std::to_string(n) + " bytes: an integer beyond 64 bits");
          const std::uint64_t raw = n == 0 ? 0 : little_endian(n);
          // Two's complement of n bytes, sign-extended.
          const bool negative = n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1;
          v->integer = static_cast<std::int64_t>(negative ? raw | (~std::uint64_t{0} << (8 * n)) : raw);
        }
        return push(std::move(v));
      }
      case 'X':
      case 0x8c:
      case 0x8d: {
        auto t = make(Kind::text);
        t->text = read_text(length(op == 'X' ? 4 : op == 0x8c ? 1 : 8));
        return push(std::move(t));
      }
      case 'B':
      case 'C':
      case 0x8e:
      case 0x96:
      case 'T':
      case 'U': {
        const int width = (op == 'B' || op == 'T') ? 4 : (op == 'C' || op == 'U') ? 1 : 8;
        const std::uint64_t n = little_endian(width);
        if (op == 'T' && (n >> 31) != 0) fail("BINSTRING with a negative length");
        auto b = make(Kind::bytes);
        b->bytes = skip_bytes(checked_length(n));
        return push(std::move(b));
      }
      case 'c': {
        const std::string module = line();
        const std::string name = line();
        return push(global(module, name));
      }
      case 0x93: {
        auto name = pop();
        auto module = pop();
        if (!is(module, Kind::text) || !is(name, Kind::text))
          fail("STACK_GLOBAL without a module and a name");
        return push(global(module->text, name->text));
      }
      case 'R': {
        auto args = pop();
        auto callable = pop();
        return push(reduce(callable, args));
      }
      case 'b': {
        auto state = pop();
        return build(*top(), state);
      }
      case 'q':
        return memo_put(little_endian(1));
      case 'r':
        return memo_put(little_endian(4));
      case 0x94:
        return memo_put(memo_.size());
      case 'h':
        return memo_get(little_endian(1));
      case 'j':
        return memo_get(little_endian(4));
      case '0':
        (void)pop();
        return;
      case '1':
        (void)pop_mark();
        return;
      default:
        break;
    }
    const std::string name = opcode_name(op);
    fail("opcode " + hex_byte(op) + (name.empty() ? " (not a pickle opcode)" : " (" + name + ")") +
         " is not one this reader understands (it reads numpy arrays, lists, ints and strings only)");
  }

  std::string path_;
  std::vector<char> buffer_;
  std::ifstream in_;
  std::int64_t size_ = 0;
  std::int64_t pos_ = 0;
  std::int64_t op_at_ = 0;  // where the opcode being run starts, for error messages
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, PickleRef> memo_;
};

}  // namespace

const PickleValue* PickleValue::find(const std::string& key) const {
  if (kind != Kind::dict) return nullptr;
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    const auto& k = items[i];
    // Python 2 pickles carry keys as str, read here as (short, so decoded) bytes.
    const bool bytes_key = k->kind == Kind::bytes && k->bytes.offset < 0 && k->bytes.decoded == key;
    if ((k->kind == Kind::text && k->text == key) || bytes_key) return items[i + 1].get();
  }
  return nullptr;
}

std::int64_t PickleValue::item_size() const {
  if (!dtype || dtype->text.size() < 2) return 0;
  const char type = dtype->text[0];
  if (type != 'u' && type != 'i' && type != 'f' && type != 'b') return 0;
  std::int64_t size = 0;
  for (std::size_t i = 1; i < dtype->text.size(); ++i) {
    const char c = dtype->text[i];
    if (c < '0' || c > '9' || size > 64) return 0;
    size = size * 10 + (c - '0');
  }
  return size;
}

std::string kind_name(const PickleValue& value) {
  switch (value.kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::text:
      return "str";
    case Kind::bytes:
      return "bytes";
    case Kind::tuple:
      return "tuple";
    case Kind::list:
      return "list";
    case Kind::dict:
      return "dict";
    case Kind::global:
      return "global " + value.text;
    case Kind::dtype:
      return "numpy dtype";
    case Kind::array:
      return "numpy array";
  }
  return "value";
}

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
