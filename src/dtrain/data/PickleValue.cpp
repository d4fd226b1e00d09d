// What a parsed pickle holds (Pickle.h): a dict's entries by key, a numpy array's item size, and
// the names of value kinds for error messages.
#include "dtrain/data/Pickle.h"

#include "dtrain/util/PickleDecoder.h"

namespace dtrain::data {

using Kind = PickleValue::Kind;

PickleValue::~PickleValue() {
  util::release_items(items);
}

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

}  // namespace dtrain::data
