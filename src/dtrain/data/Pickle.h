// A small, strict reader of Python pickles holding numpy arrays, lists, ints and strings: what the
// downsampled ImageNet batch files are (Note [Downsampled ImageNet pickles]). Anything else is an
// error naming the file, the byte offset and the opcode; nothing is executed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::data {

// A run of bytes in the file: where it starts and how long it is. Array data is not read while
// parsing (a training batch of Imagenet64 is 1.5 GB), but copied by read_pickle_bytes straight
// into its destination. Short runs (up to 256 bytes: keys, numpy's typecode b'b') and bytes that
// exist only after decoding (Python 3's protocol 2 writes bytes as _codecs.encode(text,
// "latin1")) are held in `decoded` instead (offset -1).
struct PickleBytes {
  std::int64_t offset = -1;
  std::int64_t size = 0;
  std::string decoded;
};

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

struct PickleValue {
  enum class Kind { none, boolean, integer, text, bytes, tuple, list, dict, global, dtype, array };
  Kind kind = Kind::none;
  std::int64_t integer = 0;  // boolean, integer
  // text: the string; global: "module.name"; dtype: numpy's kind and size ("u1", "f8").
  std::string text;
  char byte_order = '|';            // dtype: '<', '>' or '|' (not applicable)
  PickleBytes bytes;                // bytes; array: its data
  std::vector<PickleRef> items;     // tuple and list; dict: key, value, key, value, ...
  std::vector<std::int64_t> shape;  // array
  PickleRef dtype;                  // array
  bool fortran_order = false;       // array
  bool built = false;               // array or dtype: its state has been set (BUILD)

  // Frees `items` in a loop: a pickle nests values as deep as it is long (Note [One pickle decoder]).
  ~PickleValue();

  // The value of dict key `key` (a text key), or null.
  const PickleValue* find(const std::string& key) const;
  // Bytes per element of an array, from its dtype ("f8" -> 8).
  std::int64_t item_size() const;
};

// "dict", "list", "numpy array", ...: for error messages.
std::string kind_name(const PickleValue& value);

// Parses the pickle in `path`. Opcodes of protocols 2 to 5 that Python and numpy write for
// dicts, lists, tuples, ints, strings, bytes and numpy arrays are understood; the only globals
// accepted are numpy's array and dtype reconstructors and _codecs.encode.
PickleRef read_pickle(const std::string& path);

// Copies the `bytes.size` bytes of `bytes` (from `path`, which read_pickle parsed) to `out`.
void read_pickle_bytes(const std::string& path, const PickleBytes& bytes, void* out);

}  // namespace dtrain::data
