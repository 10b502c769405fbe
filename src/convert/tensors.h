// Stage 3b (convert): which GGUF tensors a checkpoint becomes — names, types, shapes —
// and the bytes of each, as llama.cpp's convert_hf_to_gguf.py makes them.
// Invariants: the plan lists tensors in the checkpoint's order; every tensor the
// architecture needs is present with the shape config.json implies before any byte is
// written; encode() of a planned tensor produces exactly gguf::tensor_nbytes bytes.
#pragma once

#include <string>
#include <vector>

#include "convert/checkpoint.h"
#include "core/dtype.h"

namespace minfer::convert {

// --outtype. kAuto: the type of the first 2-D tensor when it is F16 or BF16, else F16
// (convert_hf_to_gguf.py's default, "auto").
enum class OutType { kAuto, kF32, kF16, kBF16, kQ8_0 };

struct PlannedTensor {
  const StTensor* src = nullptr;
  std::string name;            // GGUF name: "blk.0.attn_q.weight"
  DType type = DType::kF32;    // the GGUF type
  std::vector<uint64_t> dims;  // GGUF order: ne[0] (the row length) first
  uint32_t permute_heads = 0;  // Llama q/k: rows regrouped per head (0: none)
};

// The concrete out type for kAuto (others are returned unchanged).
OutType resolve_outtype(OutType requested, const Checkpoint& ck);

// The GGUF tensors of `ck` at `outtype` (not kAuto). Errors: a tensor with no GGUF name,
// an unsupported dtype, a shape that disagrees with config.json, a missing tensor.
Result<std::vector<PlannedTensor>> plan_tensors(const Checkpoint& ck, OutType outtype);

// The tensor's bytes in its GGUF type. `scratch` is reused between calls.
Status encode_tensor(const PlannedTensor& t, std::vector<float>& scratch,
                     std::vector<uint8_t>& out);

}  // namespace minfer::convert
