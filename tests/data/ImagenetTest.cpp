// Downsampled ImageNet 32x32 / 64x64: batch files written here in the published form (Python's
// pickle of numpy arrays, protocols 3, 4 and 5, byte for byte as Python writes them) read back;
// malformed files refused naming the file; the class-name files; and, where python3 with numpy
// is installed, files written by Python itself as Imagenet32_Scripts does.
#include "DataTestUtil.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/Imagenet.h"
#include "dtrain/data/Pickle.h"

#include <array>
#include <cstdlib>
#include <map>

using namespace dtrain::data;
using namespace dtrain::data::testing;
using ::testing::HasSubstr;

namespace {

// Writes what Python's pickle.dump writes for a dict of numpy arrays, a list of ints and strings,
// in protocol 3 (what the published files use), 4 (Python 3.8+: frames, STACK_GLOBAL, MEMOIZE)
// or 5 (numpy's _frombuffer with an in-band bytearray). Globals are memoized and fetched again
// with BINGET, as Python does.
class PickleWriter {
 public:
  explicit PickleWriter(int protocol) : protocol_(protocol) {
    op(0x80);
    out_.push_back(static_cast<std::uint8_t>(protocol));
    frame_at_ = out_.size();
  }

  void begin_dict() {
    op('}');
    put();
    op('(');
  }
  void end_dict() { op('u'); }

  void text(const std::string& s) {
    if (protocol_ >= 4 && s.size() < 256) {
      op(0x8c);
      out_.push_back(static_cast<std::uint8_t>(s.size()));
    } else {
      op('X');
      u32(static_cast<std::uint32_t>(s.size()));
    }
    out_.insert(out_.end(), s.begin(), s.end());
    put();
  }

  void integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      op('K');
      out_.push_back(static_cast<std::uint8_t>(v));
    } else if (v >= 0 && v < 65536) {
      op('M');
      out_.push_back(static_cast<std::uint8_t>(v));
      out_.push_back(static_cast<std::uint8_t>(v >> 8));
    } else {
      op('J');
      u32(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)));
    }
  }

  void int_list(const std::vector<std::int64_t>& values) {
    op(']');
    put();
    // Python appends in chunks of 1000 between MARK and APPENDS.
    for (std::size_t i = 0; i < values.size(); i += 1000) {
      op('(');
      for (std::size_t j = i; j < std::min(values.size(), i + 1000); ++j) integer(values[j]);
      op('e');
    }
  }

  // A C-order numpy array: dtype "u1" (byte order '|') or "f8" ('<'), its shape and raw bytes.
  void array(const std::string& dtype, const std::vector<std::int64_t>& shape,
             const std::vector<std::uint8_t>& raw) {
    if (protocol_ >= 5) {
      global("numpy.core.numeric", "_frombuffer");
      op('(');
      op(0x96);  // BYTEARRAY8
      u64(raw.size());
      out_.insert(out_.end(), raw.begin(), raw.end());
      put();
      dtype_object(dtype);
      shape_tuple(shape);
      text("C");
      op('t');
      put();
      op('R');
      put();
      return;
    }
    global("numpy.core.multiarray", "_reconstruct");
    global("numpy", "ndarray");
    integer(0);
    op(0x85);
    put();
    bytes({'b'});
    op(0x87);
    put();
    op('R');
    put();
    op('(');
    integer(1);
    shape_tuple(shape);
    dtype_object(dtype);
    op(0x89);
    bytes(raw);
    op('t');
    put();
    op('b');
  }

  std::vector<std::uint8_t> finish() {
    op('.');
    if (protocol_ >= 4) {  // one frame around everything after PROTO
      std::vector<std::uint8_t> frame{0x95};
      for (int i = 0; i < 8; ++i)
        frame.push_back(static_cast<std::uint8_t>((out_.size() - frame_at_) >> (8 * i)));
      out_.insert(out_.begin() + static_cast<std::ptrdiff_t>(frame_at_), frame.begin(), frame.end());
    }
    return out_;
  }

 private:
  void op(std::uint8_t o) { out_.push_back(o); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void put() {
    if (protocol_ >= 4) {
      op(0x94);
    } else {
      op('q');
      out_.push_back(static_cast<std::uint8_t>(memo_));
    }
    ++memo_;
  }
  void get(int index) {
    op('h');
    out_.push_back(static_cast<std::uint8_t>(index));
  }
  void bytes(const std::vector<std::uint8_t>& raw) {
    if (raw.size() < 256) {
      op('C');
      out_.push_back(static_cast<std::uint8_t>(raw.size()));
    } else {
      op('B');
      u32(static_cast<std::uint32_t>(raw.size()));
    }
    out_.insert(out_.end(), raw.begin(), raw.end());
    put();
  }
  void global(const std::string& module, const std::string& name) {
    const auto it = globals_.find(module + "." + name);
    if (it != globals_.end()) return get(it->second);
    if (protocol_ >= 4) {
      text(module);
      text(name);
      op(0x93);
    } else {
      op('c');
      for (const auto& line : {module, name}) {
        out_.insert(out_.end(), line.begin(), line.end());
        out_.push_back('\n');
      }
    }
    globals_[module + "." + name] = memo_;
    put();
  }
  void shape_tuple(const std::vector<std::int64_t>& shape) {
    if (shape.size() > 3) op('(');
    for (const auto d : shape) integer(d);
    op(shape.size() == 1 ? 0x85 : shape.size() == 2 ? 0x86 : shape.size() == 3 ? 0x87 : 't');
    put();
  }
  void dtype_object(const std::string& dtype) {
    global("numpy", "dtype");
    text(dtype);
    op(0x89);
    op(0x88);
    op(0x87);
    put();
    op('R');
    put();
    op('(');
    integer(3);
    text(dtype == "u1" ? "|" : "<");
    op('N');
    op('N');
    op('N');
    integer(-1);
    integer(-1);
    integer(0);
    op('t');
    put();
    op('b');
  }

  int protocol_;
  int memo_ = 0;
  std::size_t frame_at_ = 0;
  std::vector<std::uint8_t> out_;
  std::map<std::string, int> globals_;
};

// Pixel (c, y, x) of image i of batch b: a value the reader must put in place.
std::uint8_t pixel(int b, int i, int c, int y, int x) {
  return static_cast<std::uint8_t>(b * 31 + i * 7 + c * 11 + y * 3 + x);
}
std::int64_t label_of(int b, int i) {
  return (b * 97 + i * 13) % 1000 + 1;
}  // 1-based, as in the files

struct BatchSpec {
  int batch = 0;
  int count = 3;
  int size = 32;
  int protocol = 3;
  bool mean = true;
};

std::vector<std::uint8_t> batch_bytes(const BatchSpec& s) {
  std::vector<std::uint8_t> data;
  std::vector<std::int64_t> labels;
  for (int i = 0; i < s.count; ++i) {
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < s.size; ++y)
        for (int x = 0; x < s.size; ++x) data.push_back(pixel(s.batch, i, c, y, x));
    labels.push_back(label_of(s.batch, i));
  }
  PickleWriter w(s.protocol);
  w.begin_dict();
  w.text("data");
  w.array("u1", {s.count, 3LL * s.size * s.size}, data);
  w.text("labels");
  w.int_list(labels);
  if (s.mean) {
    w.text("mean");
    std::vector<std::uint8_t> mean(static_cast<std::size_t>(3 * s.size * s.size * 8), 0);
    w.array("f8", {3LL * s.size * s.size}, mean);
  }
  w.end_dict();
  return w.finish();
}

void expect_batch(const ImageDataset& set, std::int64_t at, const BatchSpec& s) {
  for (int i = 0; i < s.count; ++i) {
    EXPECT_EQ(set.labels()[at + i].item<std::int64_t>(), label_of(s.batch, i) - 1);
    for (const auto& [c, y, x] :
         std::vector<std::array<int, 3>>{{0, 0, 0}, {1, 5, 7}, {2, s.size - 1, s.size - 2}}) {
      EXPECT_EQ(set.images()[at + i][c][y][x].item<int>(), pixel(s.batch, i, c, y, x))
          << "image " << i << " of batch " << s.batch << " at (" << c << ", " << y << ", " << x << ")";
    }
  }
}

// The published layout: train_data_batch_1..10 (with means) and val_data (without), 3 + b % 2
// images per training batch, in `train_dir` and `val_dir`.
void write_published(const std::string& train_dir, const std::string& val_dir, int size, int protocol) {
  std::filesystem::create_directories(train_dir);
  std::filesystem::create_directories(val_dir);
  for (int b = 1; b <= 10; ++b) {
    write_bytes(train_dir + "/train_data_batch_" + std::to_string(b),
                batch_bytes({b, 3 + b % 2, size, protocol, true}), false);
  }
  write_bytes(val_dir + "/val_data", batch_bytes({0, 5, size, protocol, false}), false);
}

}  // namespace

TEST(Imagenet, Imagenet32RoundTripInThePublishedFolders) {
  TempDir dir;
  write_published(dir / "Imagenet32_train", dir / "Imagenet32_val", 32, 3);
  const auto train = load_imagenet(dir.str(), 32, true);
  const auto val = load_imagenet(dir.str(), 32, false);
  EXPECT_EQ(train.size(), 35);
  EXPECT_EQ(val.size(), 5);
  EXPECT_EQ(train.num_classes(), 1000);
  EXPECT_EQ(train.input_shape(), (std::vector<std::int64_t>{3, 32, 32}));
  EXPECT_EQ(train.name(), "imagenet32/train");
  std::int64_t at = 0;
  for (int b = 1; b <= 10; ++b) {
    expect_batch(train, at, {b, 3 + b % 2, 32});
    at += 3 + b % 2;
  }
  expect_batch(val, 0, {0, 5, 32});
}

TEST(Imagenet, Imagenet64RoundTripOverProtocols) {
  // The 64x64 training set is published in two parts; each protocol Python writes reads the same.
  for (const int protocol : {3, 4, 5}) {
    TempDir dir;
    write_published(dir / "Imagenet64_train_part1", dir / "Imagenet64_val", 64, protocol);
    std::filesystem::create_directories(dir / "Imagenet64_train_part2");
    for (int b = 6; b <= 10; ++b) {
      const std::string name = "train_data_batch_" + std::to_string(b);
      std::filesystem::rename(dir / ("Imagenet64_train_part1/" + name),
                              dir / ("Imagenet64_train_part2/" + name));
    }
    const auto train = load_imagenet(dir.str(), 64, true);
    EXPECT_EQ(train.size(), 35) << "protocol " << protocol;
    EXPECT_EQ(train.input_shape(), (std::vector<std::int64_t>{3, 64, 64}));
    expect_batch(train, 0, {1, 4, 64});
    expect_batch(train, 35 - 3, {10, 3, 64});
    expect_batch(load_imagenet(dir.str(), 64, false), 0, {0, 5, 64});
  }
}

TEST(Imagenet, FactoryReadsItByNameWithOneThousandClasses) {
  TempDir dir;
  write_published(dir.str(), dir.str(), 32, 4);
  dtrain::config::DataConfig c;
  c.dataset = "Imagenet32";
  c.root = dir.str();
  const auto sets = load_datasets(c);
  EXPECT_EQ(sets.train->size(), 35);
  EXPECT_EQ(sets.test->size(), 5);
  EXPECT_EQ(sets.train->num_classes(), 1000);
  EXPECT_TRUE(sets.class_names.empty());  // no names file in the folder
  EXPECT_EQ(default_root("imagenet64"), "/usr/share/datasets/imagenet64");
}

TEST(Imagenet, MissingFilesSayWhatToPutWhere) {
  TempDir dir;
  const auto msg = error_of([&] { load_imagenet(dir.str(), 32, true); });
  EXPECT_THAT(msg, HasSubstr("data.root: no file train_data_batch_1 in " + dir.str()));
  EXPECT_THAT(msg, HasSubstr("val_data"));
  EXPECT_THAT(msg, HasSubstr("downloads nothing"));
}

namespace {
std::string malformed_error(const std::vector<std::uint8_t>& bytes, int size = 32,
                            std::string* path_out = nullptr) {
  static int counter = 0;
  TempDir dir;
  const std::string path = dir / ("val_data_" + std::to_string(++counter));
  write_bytes(path, bytes, false);
  if (path_out) *path_out = path;
  // The message as the command line prints it: without LibTorch's backtrace.
  std::string msg;
  try {
    read_imagenet_files({path}, size, "imagenet/val");
  } catch (const c10::Error& e) {
    msg = e.what_without_backtrace();
  }
  EXPECT_THAT(msg, HasSubstr(path)) << "the message names the file";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  return msg;
}
}  // namespace

TEST(Imagenet, TruncatedPickleIsRefused) {
  for (const int protocol : {3, 4}) {
    const auto bytes = batch_bytes({1, 3, 32, protocol, true});
    // Cut inside the image bytes, and just before STOP.
    for (const std::size_t keep : {bytes.size() / 2, bytes.size() - 1}) {
      auto cut = bytes;
      cut.resize(keep);
      EXPECT_THAT(malformed_error(cut), HasSubstr("truncated pickle"));
    }
  }
}

TEST(Imagenet, LengthsBeyondTheFileAreRefusedBeforeAllocating) {
  // A BINBYTES promising 4 GB in a 20-byte file.
  std::vector<std::uint8_t> bytes{0x80, 3, '}', 'q', 0, 'B', 0xf0, 0xff, 0xff, 0xff, 1, 2, 3};
  EXPECT_THAT(malformed_error(bytes), HasSubstr("only 3 bytes are left"));
}

TEST(Imagenet, WrongShapesAreRefused) {
  // 64x64 images read as imagenet32, and the hint says which data set they are.
  EXPECT_THAT(malformed_error(batch_bytes({1, 2, 64, 3, false}), 32),
              HasSubstr("'data' has shape (2, 12288), expected (N, 3072) for imagenet32"));
  EXPECT_THAT(malformed_error(batch_bytes({1, 2, 64, 3, false}), 32),
              HasSubstr("set data.dataset to imagenet64"));
  // A mean of the wrong size.
  PickleWriter w(3);
  w.begin_dict();
  w.text("data");
  w.array("u1", {1, 3072}, std::vector<std::uint8_t>(3072, 1));
  w.text("labels");
  w.int_list({5});
  w.text("mean");
  w.array("f8", {10}, std::vector<std::uint8_t>(80, 0));
  w.end_dict();
  EXPECT_THAT(malformed_error(w.finish()), HasSubstr("'mean' has shape (10,), expected (3072,)"));
  // Array data shorter than its shape says.
  PickleWriter short_data(3);
  short_data.begin_dict();
  short_data.text("data");
  short_data.array("u1", {2, 3072}, std::vector<std::uint8_t>(3072, 1));
  short_data.end_dict();
  EXPECT_THAT(malformed_error(short_data.finish()), HasSubstr("6144 elements of 1 bytes holds 3072 bytes"));
}

TEST(Imagenet, LabelsOutOfRangeOrMiscountedAreRefused) {
  for (const std::int64_t bad : {0, 1001}) {
    PickleWriter w(3);
    w.begin_dict();
    w.text("data");
    w.array("u1", {2, 3072}, std::vector<std::uint8_t>(6144, 1));
    w.text("labels");
    w.int_list({1, bad});
    w.end_dict();
    EXPECT_THAT(malformed_error(w.finish()), HasSubstr("label out of range: image 1 has label " +
                                                       std::to_string(bad) + ", expected 1..1000"));
  }
  PickleWriter w(3);
  w.begin_dict();
  w.text("data");
  w.array("u1", {2, 3072}, std::vector<std::uint8_t>(6144, 1));
  w.text("labels");
  w.int_list({1});
  w.end_dict();
  EXPECT_THAT(malformed_error(w.finish()), HasSubstr("'labels' holds 1 labels for 2 images"));
}

TEST(Imagenet, NotAPickleOrNotABatchIsRefused) {
  const std::string text = "this is a text file\n";
  EXPECT_THAT(malformed_error({text.begin(), text.end()}), HasSubstr("not a pickle"));
  EXPECT_THAT(malformed_error({}), HasSubstr("empty"));
  // A pickle that calls something other than numpy: refused by name, never run.
  const std::string evil =
      "\x80\x03"
      "cos\nsystem\n";
  EXPECT_THAT(malformed_error({evil.begin(), evil.end()}),
              HasSubstr("global os.system is not one this reader knows"));
  // An opcode these files never hold (BINFLOAT), by name and offset.
  std::vector<std::uint8_t> floats{0x80, 3, 'G', 0, 0, 0, 0, 0, 0, 0, 0, '.'};
  EXPECT_THAT(malformed_error(floats), HasSubstr("at byte 2: opcode 0x47 (BINFLOAT)"));
  // A dict without 'data'.
  PickleWriter w(4);
  w.begin_dict();
  w.text("labels");
  w.int_list({1});
  w.end_dict();
  EXPECT_THAT(malformed_error(w.finish()), HasSubstr("has no 'data' entry"));
  // Bytes after STOP.
  auto extra = batch_bytes({1, 1, 32, 3, false});
  extra.push_back('.');
  EXPECT_THAT(malformed_error(extra), HasSubstr("1 bytes follow the pickle's STOP"));
}

// Note [One pickle decoder]: a 2 MB file of two million nested tuples is refused, not a crash
// while its values are freed.
TEST(Imagenet, ADeeplyNestedPickleIsRefused) {
  std::vector<std::uint8_t> nested(3 + 2000000 + 1, 0x85);  // PROTO 3, EMPTY_TUPLE, TUPLE1 x 2e6, STOP
  nested[0] = 0x80;
  nested[1] = 3;
  nested[2] = ')';
  nested.back() = '.';
  EXPECT_THAT(malformed_error(nested), HasSubstr("the pickle holds a tuple, expected a dict"));
}

namespace {
// 1000 made-up WordNet ids whose devkit order (map_clsloc) is not their sorted order: class k
// (1-based) of map_clsloc has id n<(k * 7919) % 1000, zero-padded>, so sorted order differs.
std::string wnid_of(int k) {
  const std::string digits = std::to_string(static_cast<long>(k) * 7919 % 1000);
  return "n0" + std::string(7 - digits.size(), '0') + digits;
}
void write_clsloc(const std::string& path) {
  std::ofstream out(path);
  for (int k = 1; k <= 1000; ++k) out << wnid_of(k) << " " << k << " devkit_name_" << k << "\n";
}
// clsidx numbers the classes by sorted WordNet id: entry j names the j-th smallest id.
void write_clsidx(const std::string& path) {
  std::ofstream out(path);
  out << "{";
  for (int j = 0; j < 1000; ++j) {
    const std::string quote = j == 7 ? "\"" : "'";
    out << (j ? ",\n " : "") << j << ": " << quote << "long name " << j << (j == 7 ? ", jack-o'-lantern" : "")
        << quote;
  }
  out << "}";
}
}  // namespace

TEST(Imagenet, ClassNamesFollowTheBatchFilesNumbering) {
  TempDir dir;
  write_clsloc(dir / "map_clsloc.txt");
  auto names = load_imagenet_class_names(dir.str(), 32);
  ASSERT_EQ(names.size(), 1000u);
  EXPECT_EQ(names[0], "devkit name 1");
  // With the long names too: label 0 (devkit class 1, id n00000919) has the 919th smallest id,
  // label 999 (class 1000, id n00000000) the smallest.
  write_clsidx(dir / "imagenet1000_clsidx_to_labels.txt");
  names = load_imagenet_class_names(dir.str(), 32);
  EXPECT_EQ(names[0], "long name 919");
  EXPECT_EQ(names[999], "long name 0");
  const auto clsidx = read_clsidx_labels(dir / "imagenet1000_clsidx_to_labels.txt");
  EXPECT_EQ(clsidx[7], "long name 7, jack-o'-lantern");

  dtrain::config::DataConfig c;
  c.dataset = "imagenet32";
  c.root = dir.str();
  EXPECT_EQ(class_names(c), names);
}

TEST(Imagenet, ClassNameFilesThatCannotNameTheClassesAreRefused) {
  TempDir dir;
  write_clsidx(dir / "imagenet1000_clsidx_to_labels.txt");
  EXPECT_THAT(error_of([&] { load_imagenet_class_names(dir.str(), 32); }), HasSubstr("put map_clsloc.txt"));
  {
    std::ofstream out(dir / "bad.txt");
    out << "{0: 'tench',\n 1: goldfish}";
  }
  EXPECT_THAT(error_of([&] { read_clsidx_labels(dir / "bad.txt"); }),
              HasSubstr(dir / "bad.txt" + ":2: a quoted class name expected"));
  {
    std::ofstream out(dir / "short.txt");
    out << "{0: 'tench'}";
  }
  EXPECT_THAT(error_of([&] { read_clsidx_labels(dir / "short.txt"); }), HasSubstr("no name for class 1"));
}

namespace {
// A python3 that can import numpy ("" if none): the one on PATH, or Debian's.
std::string python_with_numpy() {
  for (const std::string python : {"python3", "/usr/bin/python3"}) {
    if (std::system((python + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return python;
  }
  return "";
}
}  // namespace

TEST(Imagenet, ReadsFilesWrittenByPythonAsTheAuthorsScriptsDo) {
  const std::string python = python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "no python3 with numpy: the format is checked by the C++ writer only";
  TempDir dir;
  // As image2numpy_imagenet_train.py: rows of R, G, B planes; labels as a list; the mean over all
  // training images; pickle.dump with the default protocol; and val_data without the mean.
  const std::string script = R"(
import numpy as np, os, pickle, sys
out = sys.argv[1]
size = 32
rng = np.random.RandomState(0)
x = rng.randint(0, 256, size=(25, 3 * size * size)).astype(np.uint8)
y = [int(v) for v in rng.randint(1, 1001, size=25)]
mean = np.mean(x, axis=0)
for i in range(10):
    lo, hi = i * 2, (i + 1) * 2 if i < 9 else 20
    d = {'data': x[lo:hi, :], 'labels': np.array(y)[lo:hi].tolist(), 'mean': mean}
    pickle.dump(d, open(os.path.join(out, 'train_data_batch_%d' % (i + 1)), 'wb'))
pickle.dump({'data': x[20:], 'labels': y[20:]}, open(os.path.join(out, 'val_data'), 'wb'), 3)
for p in (2, 5):  # Python 3's protocol 2 writes bytes as _codecs.encode(text, 'latin1')
    pickle.dump({'data': x[20:], 'labels': y[20:]}, open(os.path.join(out, 'val_p%d' % p), 'wb'), p)
x.tofile(os.path.join(out, 'pixels.raw'))
np.array(y, dtype=np.int64).tofile(os.path.join(out, 'labels.raw'))
)";
  { std::ofstream(dir / "write.py") << script; }
  ASSERT_EQ(std::system((python + " " + dir / "write.py" + " " + dir.str()).c_str()), 0);
  const auto train = load_imagenet(dir.str(), 32, true);
  const auto val = load_imagenet(dir.str(), 32, false);
  ASSERT_EQ(train.size(), 20);
  ASSERT_EQ(val.size(), 5);
  // The reference: the same pixels and labels as raw arrays.
  std::ifstream pixels(dir / "pixels.raw", std::ios::binary), labels(dir / "labels.raw", std::ios::binary);
  std::vector<char> p(25 * 3072), l(25 * 8);
  pixels.read(p.data(), static_cast<std::streamsize>(p.size()));
  labels.read(l.data(), static_cast<std::streamsize>(l.size()));
  const auto expected_images = torch::from_blob(p.data(), {25, 3, 32, 32}, torch::kUInt8).clone();
  const auto expected_labels = torch::from_blob(l.data(), {25}, torch::kLong).clone() - 1;
  EXPECT_TRUE(torch::equal(torch::cat({train.images(), val.images()}), expected_images));
  EXPECT_TRUE(torch::equal(torch::cat({train.labels(), val.labels()}), expected_labels));
  for (const char* other : {"val_p2", "val_p5"}) {
    const auto same = read_imagenet_files({dir / other}, 32, other);
    EXPECT_TRUE(torch::equal(same.images(), val.images())) << other;
    EXPECT_TRUE(torch::equal(same.labels(), val.labels())) << other;
  }
}
