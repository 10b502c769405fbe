// Fuzz target (stage 3b, convert): the safetensors reader on arbitrary bytes.
// Invariants under test: parsing never crashes, hangs or reads out of bounds (an
// oversized header length, offsets or shapes are errors); a file that parses has every
// tensor's data inside the input, exactly n_elements × element size bytes long, with
// n_elements the product of its shape, and the tensors sorted by name.
#include <cstddef>
#include <cstdint>
#include <span>

#include "convert/safetensors.h"
#include "core/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto parsed = minfer::convert::parse_safetensors(bytes);
  if (!parsed.ok()) {
    MINFER_CHECK(!parsed.error().message.empty(), "an error without a message");
    return 0;
  }
  const auto& tensors = parsed.value();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const char* name = t.name.c_str();
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;  // cannot overflow: the reader checked it
    MINFER_CHECK(n == t.n_elements, "tensor %s: n_elements %llu != product %llu", name,
                 static_cast<unsigned long long>(t.n_elements), static_cast<unsigned long long>(n));
    MINFER_CHECK(t.data.size() == n * t.elem_size, "tensor %s: %zu bytes for %llu x %u", name,
                 t.data.size(), static_cast<unsigned long long>(n), t.elem_size);
    MINFER_CHECK(
        t.data.empty() || (t.data.data() >= data && t.data.data() + t.data.size() <= data + size),
        "tensor %s: data outside the input", name);
    if (i > 0) MINFER_CHECK(tensors[i - 1].name <= t.name, "tensors not sorted at %s", name);
  }
  return 0;
}
