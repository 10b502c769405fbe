// Stage 17 (HTTP) and 18 (CLI): a grammar as the sequence state's token constraint —
// GBNF text (the server's `grammar` field, the CLI's --grammar), a JSON Schema
// (response_format json_schema, --json-schema) or any JSON (json_object), compiled
// before the run: in the server on the HTTP thread, so an unsupported construct is a
// 400 before the request takes a slot; in the CLI before the model loads.
// Invariants: the mask is src/grammar's exact mask; one matcher and mask cache per
// constraint. When no token may come next (a grammar no token of the vocabulary can
// continue, or one that can only end while end-of-generation is banned) apply() is an
// error starting "[grammar]" — the run stops loudly, never with an arbitrary token.
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

// A constraint over an already compiled grammar's state table (shared by the
// constraints made from it one after another, e.g. every reply of a chat; not by
// two threads at once).
std::unique_ptr<engine::TokenConstraint> make_grammar_constraint(
    std::shared_ptr<grammar::StateTable> table, std::shared_ptr<const grammar::TokenVocab> vocab);

}  // namespace minfer::server
