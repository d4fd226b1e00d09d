// The restricted unpickler of torch.save's state dicts (TorchStateDict.h, Note [A restricted
// unpickler for state dicts]).
#include "dtrain/io/TorchStateDict.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <array>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/util/ArchiveCheck.h"
#include "dtrain/util/PickleDecoder.h"

namespace dtrain::io {

namespace {

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum Kind { kNone, kBool, kInt, kFloat, kText, kTuple, kList, kDict, kGlobal, kStorage, kTensor };
  Kind kind = kNone;
  std::int64_t integer = 0;     // bool, int
  double number = 0.0;          // float
  std::string text;             // text; global: "module.name"
  std::vector<ValuePtr> items;  // tuple, list; dict: key, value, key, value, ...
  at::Tensor tensor;            // storage: its elements, flat; tensor
  ~Value() { util::release_items(items); }
};

ValuePtr make(Value::Kind kind) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  return value;
}

const char* kind_name(const Value& v) {
  static constexpr std::array<const char*, 11> names{"None", "bool", "int",    "float",   "str",   "tuple",
                                                     "list", "dict", "global", "storage", "tensor"};
  return names[static_cast<std::size_t>(v.kind)];
}

struct StorageType {
  const char* global;
  c10::ScalarType dtype;
};
constexpr std::array<StorageType, 10> kStorages{{{"torch.DoubleStorage", c10::ScalarType::Double},
                                                 {"torch.FloatStorage", c10::ScalarType::Float},
                                                 {"torch.HalfStorage", c10::ScalarType::Half},
                                                 {"torch.BFloat16Storage", c10::ScalarType::BFloat16},
                                                 {"torch.LongStorage", c10::ScalarType::Long},
                                                 {"torch.IntStorage", c10::ScalarType::Int},
                                                 {"torch.ShortStorage", c10::ScalarType::Short},
                                                 {"torch.CharStorage", c10::ScalarType::Char},
                                                 {"torch.ByteStorage", c10::ScalarType::Byte},
                                                 {"torch.BoolStorage", c10::ScalarType::Bool}}};

class StateDictUnpickler {
 public:
  StateDictUnpickler(std::string file, const std::string& pickle,
                     caffe2::serialize::PyTorchStreamReader& reader)
      : file_(std::move(file)), reader_(reader), input_(pickle), decoder_(input_, pickle.size()) {}

  ValuePtr run() {
    while (true) {
      if (decoder_.at_end()) fail("ends without STOP");
      const auto& op = decoder_.next();
      if (op.opcode == nullptr) fail("is not a pickle opcode");
      if (op.code == '.') return pop();  // STOP
      util::PickleArg arg;
      try {
        arg = decoder_.argument();
      } catch (const util::PickleDecodeError& e) {
        fail(e.what());
      }
      step(static_cast<char>(op.code), arg);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    const auto op = decoder_.op().code;
    throw CheckpointError(file_ + ": data.pkl: opcode 0x" + "0123456789abcdef"[(op >> 4) & 15] +
                          "0123456789abcdef"[op & 15] + " at byte " + std::to_string(decoder_.op().at) + " " +
                          what);
  }

  ValuePtr pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("pops an empty stack");
    auto value = std::move(stack_.back());
    stack_.pop_back();
    return value;
  }

  Value& top(Value::Kind kind, const char* what) {
    if (stack_.empty() || stack_.back()->kind != kind) fail(std::string(what) + " on something else");
    return *stack_.back();
  }

  std::vector<ValuePtr> pop_mark() {
    if (marks_.empty()) fail("needs a MARK that is not there");
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }

  void push_tuple(std::vector<ValuePtr> items) {
    auto tuple = make(Value::kTuple);
    tuple->items = std::move(items);
    stack_.push_back(std::move(tuple));
  }

  void push_int(std::int64_t integer, Value::Kind kind = Value::kInt) {
    auto value = make(kind);
    value->integer = integer;
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

  void step(char op, const util::PickleArg& arg) {
    switch (op) {
      case '\x80':  // PROTO, FRAME
      case '\x95':
        return;
      case '(':  // MARK
        return marks_.push_back(stack_.size());
      case ')':  // EMPTY_TUPLE, TUPLE, TUPLE1..3
        return push_tuple({});
      case 't':
        return push_tuple(pop_mark());
      case '\x85':
      case '\x86':
      case '\x87': {
        std::vector<ValuePtr> items(static_cast<std::size_t>(op - '\x84'));
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        return push_tuple(std::move(items));
      }
      case '}':  // EMPTY_DICT, EMPTY_LIST
        return stack_.push_back(make(Value::kDict));
      case ']':
        return stack_.push_back(make(Value::kList));
      case 's': {  // SETITEM
        auto value = pop();
        auto key = pop();
        auto& dict = top(Value::kDict, "SETITEM");
        dict.items.push_back(std::move(key));
        dict.items.push_back(std::move(value));
        return;
      }
      case 'u': {  // SETITEMS
        auto items = pop_mark();
        if (items.size() % 2 != 0) fail("sets a key without a value");
        auto& dict = top(Value::kDict, "SETITEMS");
        for (auto& item : items) dict.items.push_back(std::move(item));
        return;
      }
      case 'a': {  // APPEND, APPENDS
        auto value = pop();
        top(Value::kList, "APPEND").items.push_back(std::move(value));
        return;
      }
      case 'e': {
        auto items = pop_mark();
        auto& list = top(Value::kList, "APPENDS");
        for (auto& item : items) list.items.push_back(std::move(item));
        return;
      }
      case 'N':
        return stack_.push_back(make(Value::kNone));
      case '\x88':  // NEWTRUE, NEWFALSE
      case '\x89':
        return push_int(op == '\x88' ? 1 : 0, Value::kBool);
      case 'J':  // BININT, BININT1, BININT2, LONG1
        return push_int(static_cast<std::int32_t>(arg.number));
      case 'K':
      case 'M':
        return push_int(static_cast<std::int64_t>(arg.number));
      case '\x8a':
        if (!arg.fits) fail("holds an integer wider than 64 bits");
        return push_int(static_cast<std::int64_t>(arg.number));
      case 'G': {  // BINFLOAT: a big-endian double
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | ((arg.number >> (8 * i)) & 0xff);
        auto value = make(Value::kFloat);
        std::memcpy(&value->number, &bits, sizeof(bits));
        return stack_.push_back(std::move(value));
      }
      case 'X':  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
      case '\x8c':
      case '\x8d': {
        auto value = make(Value::kText);
        value->text = arg.text;
        return stack_.push_back(std::move(value));
      }
      case 'q':  // BINPUT, LONG_BINPUT, MEMOIZE, BINGET, LONG_BINGET
      case 'r':
        return put(arg.number);
      case '\x94':
        return put(memo_.size());
      case 'h':
      case 'j':
        return get(arg.number);
      case 'c':  // GLOBAL, STACK_GLOBAL
        return stack_.push_back(global(arg.text, arg.name));
      case '\x93': {
        auto name = pop();
        auto module = pop();
        if (module->kind != Value::kText || name->kind != Value::kText) fail("names a global by non-strings");
        return stack_.push_back(global(module->text, name->text));
      }
      case 'R': {  // REDUCE
        auto args = pop();
        auto callable = pop();
        return stack_.push_back(reduce(*callable, *args));
      }
      case 'b': {  // BUILD: an OrderedDict's attributes (state_dict()'s _metadata) are dropped
        pop();
        top(Value::kDict, "BUILD");
        return;
      }
      case 'Q':  // BINPERSID
        return stack_.push_back(storage(*pop()));
      default:
        fail(std::string("(") + decoder_.op().opcode->name + ") is not one a state dict needs");
    }
  }

  ValuePtr global(const std::string& module, const std::string& name) {
    const auto full = module + "." + name;
    bool known = full == "collections.OrderedDict" || full == "torch._utils._rebuild_tensor_v2";
    for (const auto& s : kStorages) known = known || full == s.global;
    if (!known) {
      fail("names global " + full +
           "; a state dict holds only tensors (torch._utils._rebuild_tensor_v2, torch.*Storage) in dicts");
    }
    auto value = make(Value::kGlobal);
    value->text = full;
    return value;
  }

  ValuePtr reduce(const Value& callable, const Value& args) {
    if (callable.kind != Value::kGlobal || args.kind != Value::kTuple)
      fail("calls something other than a global");
    if (callable.text == "collections.OrderedDict" && args.items.empty()) return make(Value::kDict);
    if (callable.text == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args.items);
    fail("calls " + callable.text + " with " + std::to_string(args.items.size()) + " arguments");
  }

  std::vector<std::int64_t> sizes(const Value& tuple, const char* what) {
    if (tuple.kind != Value::kTuple)
      fail(std::string("gives a tensor's ") + what + " as a " + kind_name(tuple));
    std::vector<std::int64_t> out;
    for (const auto& item : tuple.items) {
      if (item->kind != Value::kInt || item->integer < 0 || item->integer > (std::int64_t{1} << 48)) {
        fail(std::string("gives a tensor's ") + what + " other than integers in [0, 2^48]");
      }
      out.push_back(item->integer);
    }
    return out;
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata]).
  ValuePtr rebuild_tensor(const std::vector<ValuePtr>& a) {
    if ((a.size() != 6 && a.size() != 7) || a[0]->kind != Value::kStorage || a[1]->kind != Value::kInt) {
      fail(
          "rebuilds a tensor from other arguments than (storage, offset, size, stride, requires_grad, "
          "hooks)");
    }
    const auto size = sizes(*a[2], "size");
    const auto stride = sizes(*a[3], "stride");
    const auto offset = a[1]->integer;
    if (size.size() != stride.size() || offset < 0) fail("rebuilds a tensor whose size and stride disagree");
    // The last element the view reaches lies within the storage (each term below 2^96 fits no int64,
    // so the sum is kept in a wide type).
    __int128 last = offset;
    bool empty = false;
    for (std::size_t i = 0; i < size.size(); ++i) {
      empty = empty || size[i] == 0;
      if (size[i] > 0) last += static_cast<__int128>(size[i] - 1) * stride[i];
    }
    const auto numel = a[0]->tensor.numel();
    if (!empty && last >= numel) {
      fail("rebuilds a tensor reaching past the " + std::to_string(numel) + " elements of its storage");
    }
    auto value = make(Value::kTensor);
    value->tensor = empty ? torch::empty(size, a[0]->tensor.options())
                          : a[0]->tensor.as_strided(size, stride, offset).clone();
    return value;
  }

  // ('storage', torch.<Type>Storage, key, location, numel): the record data/<key>.
  ValuePtr storage(const Value& id) {
    const auto& p = id.items;
    if (id.kind != Value::kTuple || p.size() != 5 || p[0]->kind != Value::kText || p[0]->text != "storage" ||
        p[1]->kind != Value::kGlobal || p[2]->kind != Value::kText || p[4]->kind != Value::kInt ||
        p[4]->integer < 0) {
      fail("names a persistent object other than ('storage', type, key, location, numel)");
    }
    const auto cached = storages_.find(p[2]->text);
    if (cached != storages_.end()) return cached->second;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    for (const auto& s : kStorages) {
      if (p[1]->text == s.global) dtype = s.dtype;
    }
    if (dtype == c10::ScalarType::Undefined) fail("names a storage of type " + p[1]->text);
    const std::string record = "data/" + p[2]->text;
    if (!reader_.hasRecord(record)) fail("names storage record " + record + ", which is missing");
    const auto [data, bytes] = reader_.getRecord(record);
    const auto numel = p[4]->integer;
    const auto item = static_cast<std::int64_t>(c10::elementSize(dtype));
    if (numel > static_cast<std::int64_t>(bytes) / item) {
      fail("gives storage " + record + " " + std::to_string(numel) + " elements; its record holds " +
           std::to_string(bytes) + " bytes");
    }
    auto value = make(Value::kStorage);
    value->tensor = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
    if (numel > 0) std::memcpy(value->tensor.data_ptr(), data.get(), static_cast<std::size_t>(numel * item));
    storages_[p[2]->text] = value;
    return value;
  }

  std::string file_;
  caffe2::serialize::PyTorchStreamReader& reader_;
  util::PickleMemoryInput input_;
  util::PickleDecoder decoder_;
  std::vector<ValuePtr> stack_;
  std::vector<std::size_t> marks_;
  std::map<std::uint64_t, ValuePtr> memo_;
  std::map<std::string, ValuePtr> storages_;
};

}  // namespace

std::map<std::string, at::Tensor> read_torch_state_dict(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path.string() + " cannot be opened");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = std::move(buffer).str();
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::string pickle;
  try {
    std::istringstream archive(bytes);
    util::check_archive(archive);  // Note [Checking an archive before LibTorch reads it]
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path.string());
    const auto [data, size] = reader->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), size);
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw CheckpointError(path.string() + " is not a torch.save file (" + what.substr(0, what.find('\n')) +
                          ")");
  }
  ValuePtr root;
  try {
    root = StateDictUnpickler(path.string(), pickle, *reader).run();
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    // A storage record the zip reader cannot inflate (corrupt data behind a valid directory).
    std::string what = e.what();
    throw CheckpointError(path.string() + " is not a torch.save file (" + what.substr(0, what.find('\n')) +
                          ")");
  }
  if (root->kind != Value::kDict) {
    throw CheckpointError(path.string() + " holds a " + kind_name(*root) +
                          ", expected a dict of name -> tensor (a state_dict)");
  }
  std::map<std::string, at::Tensor> tensors;
  for (std::size_t i = 0; i + 1 < root->items.size(); i += 2) {
    const auto& key = *root->items[i];
    const auto& value = *root->items[i + 1];
    if (key.kind != Value::kText || value.kind != Value::kTensor) {
      throw CheckpointError(path.string() + " holds a dict entry " +
                            (key.kind == Value::kText ? key.text : "") + " of " + kind_name(key) + " -> " +
                            kind_name(value) + ", expected name -> tensor");
    }
    tensors[key.text] = value.tensor;
  }
  return tensors;
}

}  // namespace dtrain::io
