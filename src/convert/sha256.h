// Stage 3b (convert): SHA-256 (FIPS 180-4), for the converter's tokenizer fingerprint
// (convert_hf_to_gguf.py hashes the token ids of a fixed text to name the pre-tokenizer).
// Invariant: sha256_hex(bytes) is the lowercase hex digest Python's hashlib prints.
#pragma once

#include <string>
#include <string_view>

namespace minfer::convert {

std::string sha256_hex(std::string_view bytes);

}  // namespace minfer::convert
