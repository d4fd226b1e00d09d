// Reading a state dict that Python's torch.save wrote (a Hugging Face pytorch_model.bin) with a
// restricted unpickler of dtrain's own, where LibTorch's cannot: LibTorch 1.13's unpickler turns
// collections.OrderedDict into None (it expects one only as a tensor's unused backward hooks), so
// torch.save(model.state_dict()), an OrderedDict with _metadata, does not load through
// torch::pickle_load.
//
// Note [A restricted unpickler for state dicts]
// The archive is checked first (util::check_archive, Note [Checking an archive before LibTorch reads
// it]); then data.pkl is read opcode by opcode with util::PickleDecoder (Note [One pickle decoder])
// by a stack machine that knows exactly what a state dict needs: dicts, lists, tuples, ints, floats,
// strings, booleans, None, the memo, and four callables: collections.OrderedDict (an empty dict; its
// BUILD state, _metadata, is dropped), torch._utils._rebuild_tensor_v2 (a tensor over a storage,
// its sizes and strides checked to lie within it), and the persistent id ('storage', torch.<Type>Storage,
// key, location, numel) naming the record data/<key>. Any other global, and any opcode that is not one of
// those, is refused naming the file, the opcode and its offset: nothing in the file is called.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>

namespace dtrain::io {

// The dict of name -> tensor in the torch.save file `path` (CPU tensors, the file's dtypes).
// Throws io::CheckpointError naming the file for anything else.
std::map<std::string, at::Tensor> read_torch_state_dict(const std::filesystem::path& path);

}  // namespace dtrain::io
