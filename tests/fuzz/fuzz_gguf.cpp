// Fuzz target (stage 2): File::parse on arbitrary bytes.
// Invariant under test: parsing never crashes, never reads outside the input and
// never allocates more than the input can justify; a success yields tensor views
// that lie inside the input and metadata that survives a write → parse round trip.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/check.h"
#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minfer::gguf;
  auto f = File::parse(std::span<const uint8_t>(data, size), "fuzz");
  if (!f.ok()) return 0;
  Writer w;
  for (const auto& t : (*f)->tensors()) {
    MINFER_CHECK(t.data >= data && t.data + t.n_bytes <= data + size,
                 "tensor view outside the input");
    MINFER_CHECK(t.offset % (*f)->alignment() == 0, "misaligned tensor accepted");
    // Display must cope with whatever was accepted.
  }
  for (const auto& kv : (*f)->metadata()) {
    (void)kv.value.to_display();
    w.set(kv.key, kv.value);
  }
  // Metadata we accept we must be able to write and read back unchanged.
  auto bytes = w.to_bytes();
  MINFER_CHECK(bytes.ok(), "accepted metadata does not write: %s", bytes.error().message.c_str());
  auto back = File::parse(*bytes, "rewritten");
  MINFER_CHECK(back.ok(), "rewritten file does not parse: %s", back.error().message.c_str());
  MINFER_CHECK((*back)->metadata().size() == (*f)->metadata().size(), "metadata count changed");
  for (size_t k = 0; k < (*back)->metadata().size(); ++k) {
    const Value& a = (*f)->metadata()[k].value;
    const Value& b = (*back)->metadata()[k].value;
    // Floats compare bitwise through to_display (NaN != NaN with operator==).
    MINFER_CHECK(a.to_display(1u << 20) == b.to_display(1u << 20), "value %zu changed", k);
  }
  return 0;
}
