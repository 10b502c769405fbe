// Stage 17 (HTTP): a request's grammar as the sequence state's token constraint —
// GBNF text (the `grammar` field), a JSON Schema (response_format json_schema) or any
// JSON (json_object), compiled on the HTTP thread so an unsupported construct is a
// 400 before the request takes a slot.
// Invariant: the mask is src/grammar's exact mask; one matcher and mask cache per request.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"
#include "engine/sequence.h"
#include "grammar/token_mask.h"

namespace minfer::server {

// Compiles `gbnf` (start rule `root`) against the shared vocabulary trie.
Result<std::unique_ptr<engine::TokenConstraint>> make_grammar_constraint(
    const std::string& gbnf, std::shared_ptr<const grammar::TokenVocab> vocab);

}  // namespace minfer::server
