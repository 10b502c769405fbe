// Stage 14b: JSON Schema → GBNF. The grammar generates JSON text that the schema
// validates; where it is stricter than the schema it says so below. A keyword or
// feature it cannot express is an error naming it — never a silently looser grammar.
// Supported: type (and lists of types), nullable, properties / required /
// additionalProperties, items / prefixItems (and the older array form of items),
// minItems / maxItems, enum, const, anyOf / oneOf (oneOf as anyOf), allOf of objects
// (or of enums: their common values), local $refs (#, #/$defs/…, #/definitions/…, any
// JSON pointer into the document; recursion allowed), minLength / maxLength, anchored
// `pattern`s (literals, classes, groups, alternation, quantifiers), integer minimum /
// maximum / exclusive bounds, string formats date, time, date-time, uuid.
// Stricter than the schema: properties come in schema order (required ones first),
// additional properties after them and only when additionalProperties allows them;
// numbers have at most 16 integer digits; strings use one spelling per character;
// whitespace between tokens is bounded (a newline and up to 20 blanks).
// The one looser case, by design as in llama.cpp: oneOf is generated as anyOf (a
// document may match more than one branch when the branches overlap).
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"

namespace minfer::grammar {

// `schema` is JSON text. The result is GBNF text whose start rule is `root`.
Result<std::string> json_schema_to_gbnf(std::string_view schema);

// The generic JSON grammar (any value; `root` is an object, as for
// response_format {"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace minfer::grammar
