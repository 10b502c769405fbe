// Stage 14b: JSON Schema → GBNF (json_schema.h): the entry points, the primitive rules
// and the converter's core (schema_converter.h) — the rule table, keyword checks, local
// $refs and the dispatch of a schema node by keyword and type. Each schema node becomes
// a named rule; $refs become rules named after their target so recursive schemas work.
// The primitive rules and the bounded whitespace follow the shape of llama.cpp's
// converter (common/json-schema-to-grammar.cpp); the object layout (required
// properties, then optional ones, then additional ones, each in schema order) too.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "grammar/schema_converter.h"
#include "grammar/schema_internal.h"

namespace minfer::grammar {
namespace {

using schema::Json;

const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> p = {
      {"ws", "| \" \" | \"\\n\" [ \\t]{0,20}"},
      {"boolean", "(\"true\" | \"false\") ws"},
      {"null", "\"null\" ws"},
      {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})"},
      {"string", "\"\\\"\" char* \"\\\"\" ws"},
      {"integral-part", "\"0\" | [1-9] [0-9]{0,15}"},
      {"decimal-part", "[0-9]{1,16}"},
      {"integer", "\"-\"? integral-part ws"},
      {"number", "\"-\"? integral-part (\".\" decimal-part)? ([eE] [-+]? integral-part)? ws"},
      {"value", "object | array | string | number | boolean | null"},
      {"object", "\"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws"},
      {"array", "\"[\" ws (value (\",\" ws value)*)? \"]\" ws"},
      {"date",
       "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"},
      {"time",
       "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
       "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
      {"date-time", "date \"T\" time"},
      {"uuid",
       "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
       "[0-9a-fA-F]{12}"},
      // Formats below are conservative subsets of what their RFCs allow, so that any
      // validator accepts them: ipv4 without leading zeros (RFC 2673 dotted-quad as
      // Python's ipaddress reads it), hostnames of up to 4 labels of up to 32
      // characters (RFC 1123, well under 253 in all), e-mail as up to 4 dot-atoms (63
      // characters at most) at a domain
      // with an alphabetic top label (RFC 5321), URIs as scheme://host[:port][/path]
      // [?query][#fragment] with unreserved, sub-delim and percent-encoded characters
      // (RFC 3986).
      {"ipv4-octet", "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]"},
      {"ipv4", "ipv4-octet \".\" ipv4-octet \".\" ipv4-octet \".\" ipv4-octet"},
      {"hostname-label", "[a-zA-Z0-9] ([a-zA-Z0-9\\-]{0,30} [a-zA-Z0-9])?"},
      {"hostname", "hostname-label (\".\" hostname-label){0,3}"},
      {"email-atom", "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\-]{1,15}"},
      {"email",
       "email-atom (\".\" email-atom){0,3} \"@\" hostname-label (\".\" hostname-label){0,2} "
       "\".\" [a-zA-Z]{2,16}"},
      {"uri-char", "[a-zA-Z0-9._~!$&'()*+,;=:@\\-] | \"%\" [0-9a-fA-F] [0-9a-fA-F]"},
      {"uri",
       "[a-zA-Z] [a-zA-Z0-9+.\\-]{0,15} \"://\" hostname (\":\" [0-9]{1,5})? "
       "(\"/\" uri-char{0,32}){0,8} (\"?\" (uri-char | [/?]){0,64})? "
       "(\"#\" (uri-char | [/?]){0,32})?"},
  };
  return p;
}

// Rules each primitive uses.
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> d = {
      {"boolean", {"ws"}},
      {"null", {"ws"}},
      {"string", {"char", "ws"}},
      {"integer", {"integral-part", "ws"}},
      {"number", {"integral-part", "decimal-part", "ws"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"ws", "string", "value"}},
      {"array", {"ws", "value"}},
      {"date-time", {"date", "time"}},
      {"ipv4", {"ipv4-octet"}},
      {"hostname", {"hostname-label"}},
      {"email", {"email-atom", "hostname-label"}},
      {"uri", {"hostname", "uri-char"}},
  };
  return d;
}

}  // namespace

namespace schema {

// Keywords that only annotate (they never change which documents are valid).
const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {
      "$schema",    "$id",      "$comment",  "title", "description", "examples", "default",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict",   "$anchor"};
  return a;
}

Result<std::string> Converter::run() {
  MINFER_TRY(std::string body, visit(root_, "root-value", 0));
  rules_["root"] = body;
  std::string out = "root ::= " + body + "\n";
  for (const auto& [name, b] : rules_) {
    if (name != "root") out += name + " ::= " + b + "\n";
  }
  return out;
}

std::string Converter::use(const std::string& name) {
  if (rules_.count(name)) return name;
  rules_[name] = primitives().at(name);
  auto it = primitive_deps().find(name);
  if (it != primitive_deps().end()) {
    for (const auto& d : it->second) use(d);
  }
  return name;
}

std::string Converter::add_rule(const std::string& hint, const std::string& body) {
  std::string base;
  for (char c : hint) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) {
      base += c;
    } else if (base.empty() || base.back() != '-') {
      base += '-';
    }
  }
  if (base.empty() || base == "-") base = "r";
  std::string name = base;
  for (int i = 2; rules_.count(name) || primitives().count(name); ++i) {
    if (rules_.count(name) && rules_[name] == body) return name;
    name = base + "-" + std::to_string(i);
  }
  rules_[name] = body;
  return name;
}

Error Converter::unsupported(const std::string& kw, const std::string& path) {
  return make_error("JSON Schema: unsupported keyword '" + kw + "' at " + path);
}

Status Converter::check_keywords(const Json& s, const std::set<std::string>& allowed,
                                 const std::string& path) {
  for (const auto& [k, v] : s.items()) {
    if (annotations().count(k) || allowed.count(k)) continue;
    return unsupported(k, path);
  }
  return Ok{};
}

std::string Converter::json_literal(const Json& v) {
  return literal(v.dump());
}

std::string Converter::repeat(uint64_t lo, uint64_t hi) {
  if (hi == UINT64_MAX) return lo == 0 ? "*" : lo == 1 ? "+" : "{" + std::to_string(lo) + ",}";
  if (lo == hi) return "{" + std::to_string(lo) + "}";
  return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

Result<uint64_t> Converter::count(const Json& s, const char* kw, uint64_t dflt,
                                  const std::string& path) {
  if (!s.contains(kw)) return dflt;
  const Json& v = s[kw];
  if (!v.is_number_integer() &&
      !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
    return make_error(std::string("JSON Schema: ") + kw + " must be an integer at " + path);
  }
  const double d = v.get<double>();
  if (d < 0) return make_error(std::string("JSON Schema: ") + kw + " must be >= 0 at " + path);
  if (d > kMaxRepetition) {
    return make_error(std::string("JSON Schema: ") + kw + " larger than " +
                      std::to_string(kMaxRepetition) + " at " + path + " is not supported");
  }
  return static_cast<uint64_t>(d);
}

// Local references only: "#" or a JSON pointer into this document (RFC 6901), which
// covers #/$defs/..., #/definitions/... and paths like #/properties/a.
Result<const Json*> Converter::resolve(const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#' || (ref.size() > 1 && ref[1] != '/')) {
    return make_error("JSON Schema: $ref '" + ref + "' at " + path +
                      " is not supported (only local references: #, #/$defs/..., "
                      "#/definitions/...)");
  }
  const Json* cur = &root_;
  size_t pos = 1;
  while (pos < ref.size()) {
    const size_t next = std::min(ref.find('/', pos + 1), ref.size());
    std::string token;  // with ~1 → '/' and ~0 → '~' undone
    for (size_t i = pos + 1; i < next; ++i) {
      if (ref[i] == '~' && i + 1 < next && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
        token.push_back(ref[i + 1] == '1' ? '/' : '~');
        ++i;
      } else {
        token.push_back(ref[i]);
      }
    }
    if (cur->is_object() && cur->contains(token)) {
      cur = &(*cur)[token];
    } else if (cur->is_array() && !token.empty() && token.size() < 10 &&
               token.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(token) < cur->size()) {
      cur = &(*cur)[std::stoul(token)];
    } else {
      return make_error("JSON Schema: $ref '" + ref + "' at " + path + " does not resolve");
    }
    pos = next;
  }
  return cur;
}

Result<std::string> Converter::visit(const Json& s, const std::string& path, int depth) {
  if (depth > 256) return make_error("JSON Schema: nested deeper than 256 at " + path);
  if (s.is_boolean()) {
    if (s.get<bool>()) return use("value");
    return make_error("JSON Schema: 'false' at " + path + " matches nothing");
  }
  if (!s.is_object()) return make_error("JSON Schema: a schema must be an object at " + path);

  if (s.contains("$ref")) {
    MINFER_TRY_STATUS(check_keywords(s, {"$ref"}, path));
    if (!s["$ref"].is_string()) return make_error("JSON Schema: $ref must be a string at " + path);
    const std::string ref = s["$ref"].get<std::string>();
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    MINFER_TRY(const Json* target, resolve(ref, path));
    const std::string name =
        add_rule("ref-" + ref.substr(ref.rfind('/') + 1), "<pending " + ref + ">");
    refs_[ref] = name;
    MINFER_TRY(std::string body, visit(*target, ref, depth + 1));
    rules_[name] = body;
    return name;
  }
  if (s.contains("const")) {
    MINFER_TRY_STATUS(check_keywords(s, {"const", "type"}, path));
    return json_literal(s["const"]) + " " + use("ws");
  }
  if (s.contains("enum")) {
    MINFER_TRY_STATUS(check_keywords(s, {"enum", "type"}, path));
    if (!s["enum"].is_array() || s["enum"].empty()) {
      return make_error("JSON Schema: enum must be a non-empty array at " + path);
    }
    std::string out = "(";
    for (size_t i = 0; i < s["enum"].size(); ++i) {
      out += (i ? " | " : "") + json_literal(s["enum"][i]);
    }
    return out + ") " + use("ws");
  }
  for (const char* kw : {"anyOf", "oneOf"}) {
    if (s.contains(kw)) return visit_any_of(s, kw, path, depth);
  }
  if (s.contains("allOf")) return visit_all_of(s, path, depth);

  bool nullable = false;
  if (s.contains("nullable")) {
    if (!s["nullable"].is_boolean())
      return make_error("JSON Schema: nullable must be a boolean at " + path);
    nullable = s["nullable"].get<bool>();
  }
  std::vector<std::string> types;
  if (s.contains("type")) {
    const Json& t = s["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array()) {
      for (const auto& x : t) {
        if (!x.is_string()) return make_error("JSON Schema: type must be strings at " + path);
        types.push_back(x.get<std::string>());
      }
    } else {
      return make_error("JSON Schema: type must be a string or an array at " + path);
    }
  } else if (s.contains("properties") || s.contains("additionalProperties") ||
             s.contains("required") || s.contains("minProperties") || s.contains("maxProperties")) {
    types.push_back("object");
  } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
             s.contains("maxItems")) {
    types.push_back("array");
  } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") ||
             s.contains("maxLength")) {
    types.push_back("string");
  } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
             s.contains("exclusiveMaximum")) {
    types.push_back("number");
  }
  if (types.empty()) {
    MINFER_TRY_STATUS(check_keywords(s, {"nullable"}, path));
    return use("value");
  }
  if (nullable && std::find(types.begin(), types.end(), "null") == types.end()) {
    types.push_back("null");
  }
  std::vector<std::string> alts;
  for (const auto& t : types) {
    MINFER_TRY(std::string a, visit_type(s, t, path, depth));
    alts.push_back(a);
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return add_rule(path, out + ")");
}

// Keywords valid next to `type` (a keyword for another type is ignored, as the spec
// says, but must still be one we know).
const std::set<std::string>& Converter::typed_keywords() {
  static const std::set<std::string> k = {"type",
                                          "nullable",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "pattern",
                                          "format",
                                          "minLength",
                                          "maxLength",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "multipleOf",
                                          "minProperties",
                                          "maxProperties",
                                          "uniqueItems"};
  return k;
}

Result<std::string> Converter::visit_type(const Json& s, const std::string& t,
                                          const std::string& path, int depth) {
  MINFER_TRY_STATUS(check_keywords(s, typed_keywords(), path));
  if (t == "null") return use("null");
  if (t == "boolean") return use("boolean");
  if (t == "string") return visit_string(s, path);
  if (t == "integer") return visit_integer(s, path);
  if (t == "number") return visit_number(s, path);
  if (t == "array") return visit_array(s, path, depth);
  if (t == "object") return visit_object(s, path, depth);
  return make_error("JSON Schema: unknown type '" + t + "' at " + path);
}

}  // namespace schema

Result<std::string> json_schema_to_gbnf(std::string_view schema) {
  Json root;
  try {
    root = Json::parse(schema.begin(), schema.end());
  } catch (const nlohmann::json::exception& e) {
    return make_error(std::string("JSON Schema: not valid JSON: ") + e.what());
  }
  schema::Converter c(root);
  return c.run();
}

std::string json_object_gbnf() {
  std::string out = "root ::= object\n";
  for (const char* name : {"object", "value", "array", "string", "char", "number", "integral-part",
                           "decimal-part", "boolean", "null", "ws"}) {
    out += std::string(name) + " ::= " + primitives().at(name) + "\n";
  }
  return out;
}

}  // namespace minfer::grammar
