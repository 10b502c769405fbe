// Stage 16 (sessions): the --session file — one conversation's host state and KV rows.
// Invariants: a file is read back only if its magic, version and checksum match and it
// was written for the same model (a hash of the GGUF's metadata and tensor table);
// anything else is an Error naming what differed, never a partial restore. Writes go
// to a temporary file renamed over the target, so a crash never leaves half a session.
//
// Layout (little-endian, as written by the host):
//   "MINFSESS"  u32 version  u32 kv_types  u64 model_hash
//   u64 state_len  u64 n_kv_tokens  u64 kv_token_bytes
//   state (JSON text, state_len bytes)  KV (n_kv_tokens * kv_token_bytes bytes)
//   u64 checksum (XXH3-64 of every byte before it)
// kv_types: byte 0 the K cache's graph::KvFormat + 1, byte 1 the V cache's + 1, bit 16
// set when the rows are stored rotated (llama.cpp's Walsh-Hadamard rotation of a
// quantized cache, engine Context::kv_rotated); 0 where the writer did not record them
// (files from before: the row size is all there is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "gguf/gguf.h"
#include "graph/params.h"

namespace minfer::chat {

// 2: XXH3-64 checksum and model hash (1 used FNV-1a 64; such files are refused).
inline constexpr uint32_t kSessionVersion = 2;

// XXH3-64 over metadata (key, type, value; arrays element by element), the tensor
// table (name, type, dims, offset) and the first 256 bytes of every tensor. Editing
// metadata, re-quantizing or other weights of the same shapes change it; reading it
// touches one page per tensor, not the whole file.
uint64_t model_hash(const gguf::Model& model);

struct SessionData {
  uint64_t model_hash = 0;
  // The cache formats the rows were stored in; nullopt: not recorded (an older file).
  std::optional<graph::KvFormats> kv_format;
  bool kv_rotated = false;       // rows stored rotated (recorded with kv_format)
  nlohmann::ordered_json state;  // messages, stream, cursor state (conversation.cpp)
  uint64_t n_kv_tokens = 0;
  uint64_t kv_token_bytes = 0;
  std::vector<std::byte> kv;  // n_kv_tokens * kv_token_bytes
};

Status write_session(const std::string& path, const SessionData& data);
// Error: missing/short file, wrong magic or version, checksum mismatch, sizes that do
// not add up. The model hash is returned, not checked (the caller names both).
Result<SessionData> read_session(const std::string& path);

// Error naming both when `data` records KV formats other than `format`, or rows rotated
// where this run's are not (or the reverse) — a restore into another cache type or
// basis: rows of equal size would decode as garbage. `what` starts it.
Status check_kv_format(const std::string& what, const SessionData& data, graph::KvFormats format,
                       bool rotated);

}  // namespace minfer::chat
