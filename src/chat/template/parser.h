// Stage 5 (messages → text): tokens → statement tree, following jinja2/parser.py's
// grammar and operator precedence. Invariant: a construct outside the supported subset
// is a parse error naming it (never skipped), so an unsupported template cannot render.
#pragma once

#include <vector>

#include "chat/template/ast.h"
#include "chat/template/lexer.h"
#include "core/result.h"

namespace minfer::chat_template {

Result<Body> parse(const std::vector<Token>& tokens);

}  // namespace minfer::chat_template
