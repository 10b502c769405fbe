// Fuzz target (stage 14b): JSON Schema → GBNF on arbitrary bytes (the server compiles
// schemas its clients send).
// Invariants under test: conversion never crashes, hangs or reads out of bounds; it
// returns a grammar or an error; every grammar it returns parses (the converter never
// emits invalid GBNF) and a matcher starts on it or fails with a loud limit error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view schema(reinterpret_cast<const char*>(data), size);
  auto gbnf = minfer::grammar::json_schema_to_gbnf(schema);
  if (!gbnf.ok()) return 0;
  auto g = minfer::grammar::Grammar::parse(*gbnf);
  MINFER_CHECK(g.ok(), "converter output does not parse: %s\n%s",
               g.ok() ? "" : g.error().message.c_str(), gbnf->c_str());
  auto m = minfer::grammar::Matcher::create(*g);
  if (!m.ok()) {
    MINFER_CHECK(m.error().message.find("grammar state too large") != std::string::npos,
                 "matcher start failed: %s", m.error().message.c_str());
  }
  return 0;
}
