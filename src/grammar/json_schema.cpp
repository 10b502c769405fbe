// Stage 14b: JSON Schema → GBNF (json_schema.h). Each schema node becomes a named
// rule; $refs become rules named after their target so recursive schemas work.
// The primitive rules and the bounded whitespace follow the shape of llama.cpp's
// converter (common/json-schema-to-grammar.cpp); the object layout (required
// properties, then optional ones, then additional ones, each in schema order) too.
#include "grammar/json_schema.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "grammar/schema_internal.h"

namespace minfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

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

// Keywords that only annotate (they never change which documents are valid).
const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {
      "$schema",    "$id",      "$comment",  "title", "description", "examples", "default",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict",   "$anchor"};
  return a;
}

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  Result<std::string> run() {
    MINFER_TRY(std::string body, visit(root_, "root-value", 0));
    rules_["root"] = body;
    std::string out = "root ::= " + body + "\n";
    for (const auto& [name, b] : rules_) {
      if (name != "root") out += name + " ::= " + b + "\n";
    }
    return out;
  }

 private:
  // Makes a primitive rule (and what it uses) part of the output; returns its name.
  std::string use(const std::string& name) {
    if (rules_.count(name)) return name;
    rules_[name] = primitives().at(name);
    auto it = primitive_deps().find(name);
    if (it != primitive_deps().end()) {
      for (const auto& d : it->second) use(d);
    }
    return name;
  }

  // A new rule named after `hint` (made unique); returns its name.
  std::string add_rule(const std::string& hint, const std::string& body) {
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

  static Error unsupported(const std::string& kw, const std::string& path) {
    return make_error("JSON Schema: unsupported keyword '" + kw + "' at " + path);
  }

  Status check_keywords(const Json& s, const std::set<std::string>& allowed,
                        const std::string& path) {
    for (const auto& [k, v] : s.items()) {
      if (annotations().count(k) || allowed.count(k)) continue;
      return unsupported(k, path);
    }
    return Ok{};
  }

  static std::string json_literal(const Json& v) { return schema::literal(v.dump()); }

  // Local references only: "#" or a JSON pointer into this document (RFC 6901), which
  // covers #/$defs/..., #/definitions/... and paths like #/properties/a.
  Result<const Json*> resolve(const std::string& ref, const std::string& path) {
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

  Result<std::string> visit(const Json& s, const std::string& path, int depth) {
    if (depth > 256) return make_error("JSON Schema: nested deeper than 256 at " + path);
    if (s.is_boolean()) {
      if (s.get<bool>()) return use("value");
      return make_error("JSON Schema: 'false' at " + path + " matches nothing");
    }
    if (!s.is_object()) return make_error("JSON Schema: a schema must be an object at " + path);

    if (s.contains("$ref")) {
      MINFER_TRY_STATUS(check_keywords(s, {"$ref"}, path));
      if (!s["$ref"].is_string())
        return make_error("JSON Schema: $ref must be a string at " + path);
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
      if (!s.contains(kw)) continue;
      MINFER_TRY_STATUS(
          check_keywords(s, {kw, "type", "properties", "required", "additionalProperties"}, path));
      const Json& alts = s[kw];
      if (!alts.is_array() || alts.empty()) {
        return make_error(std::string("JSON Schema: ") + kw + " must be a non-empty array at " +
                          path);
      }
      const bool merge =
          s.contains("properties") || s.contains("required") || s.contains("additionalProperties");
      std::string out = "(";
      size_t n_out = 0;
      for (size_t i = 0; i < alts.size(); ++i) {
        const std::string sub = path + "/" + kw + "/" + std::to_string(i);
        std::string a;
        if (merge) {
          MINFER_TRY(std::optional<Json> merged, merge_object(s, alts[i], sub));
          if (!merged) continue;  // this alternative cannot hold the sibling properties
          MINFER_TRY(a, visit(*merged, sub, depth + 1));
        } else {
          MINFER_TRY(a, visit(alts[i], sub, depth + 1));
        }
        out += (n_out++ ? " | " : "") + a;
      }
      if (n_out == 0) {
        return make_error(std::string("JSON Schema: no alternative of ") + kw + " at " + path +
                          " can hold its sibling required properties");
      }
      return add_rule(path, out + ")");
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
               s.contains("required") || s.contains("minProperties") ||
               s.contains("maxProperties")) {
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
  static const std::set<std::string>& typed_keywords() {
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

  Result<std::string> visit_type(const Json& s, const std::string& t, const std::string& path,
                                 int depth) {
    MINFER_TRY_STATUS(check_keywords(s, typed_keywords(), path));
    if (t == "null") return use("null");
    if (t == "boolean") return use("boolean");
    if (t == "string") return visit_string(s, path);
    if (t == "integer") return visit_integer(s, path);
    if (t == "number") return visit_number(s, path);
    if (t == "array") return visit_array(s, path, depth);
    if (t == "object") {
      std::vector<std::pair<std::string, const Json*>> props;
      if (s.contains("properties")) {
        if (!s["properties"].is_object())
          return make_error("JSON Schema: properties must be an object at " + path);
        for (const auto& [k, v] : s["properties"].items()) props.emplace_back(k, &v);
      }
      std::set<std::string> required;
      if (s.contains("required")) {
        if (!s["required"].is_array())
          return make_error("JSON Schema: required must be an array at " + path);
        for (const auto& r : s["required"]) {
          if (!r.is_string())
            return make_error("JSON Schema: required must list strings at " + path);
          required.insert(r.get<std::string>());
        }
      }
      const Json* additional =
          s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
      MINFER_TRY(const uint64_t min_props, count(s, "minProperties", 0, path));
      MINFER_TRY(const uint64_t max_props, count(s, "maxProperties", UINT64_MAX, path));
      if (max_props < min_props) {
        return make_error("JSON Schema: maxProperties < minProperties at " + path);
      }
      return build_object(props, required, additional, path, depth, min_props, max_props);
    }
    return make_error("JSON Schema: unknown type '" + t + "' at " + path);
  }

  Result<std::string> visit_string(const Json& s, const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (s.contains("pattern") || has_len) {
        return make_error("JSON Schema: 'format' with 'pattern' or a length at " + path +
                          " is not supported");
      }
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      static const std::set<std::string> kFormats = {"date", "time",     "date-time", "uuid",
                                                     "ipv4", "hostname", "email",     "uri"};
      if (!kFormats.count(f)) {
        return make_error("JSON Schema: unsupported format '" + f + "' at " + path +
                          " (supported: date, time, date-time, uuid, ipv4, hostname, email, uri)");
      }
      return add_rule(f + "-string", "\"\\\"\" " + use(f) + " \"\\\"\" " + use("ws"));
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string())
        return make_error("JSON Schema: pattern must be a string at " + path);
      MINFER_TRY(const schema::Pattern p, schema::pattern_to_gbnf(s["pattern"].get<std::string>()));
      if (has_len) {
        // Lengths beside a pattern: kept when every string the pattern matches already
        // has an allowed length (a grammar for the intersection is not built).
        MINFER_TRY(const uint64_t lo, count(s, "minLength", 0, path));
        MINFER_TRY(const uint64_t hi, count(s, "maxLength", UINT64_MAX, path));
        auto show = [](uint64_t v) {
          return v == UINT64_MAX ? std::string("inf") : std::to_string(v);
        };
        if (p.min_len < lo || p.max_len > hi) {
          return make_error("JSON Schema: minLength/maxLength with 'pattern' at " + path +
                            " is not supported unless every string the pattern matches fits (the "
                            "pattern's lengths are " +
                            show(p.min_len) + ".." + show(p.max_len) + ", the bounds " + show(lo) +
                            ".." + show(hi) + "; put the length in the pattern, e.g. {m,n})");
        }
      }
      return add_rule(path + "-pattern", "\"\\\"\" " + p.expr + " \"\\\"\" " + use("ws"));
    }
    if (has_len) {
      MINFER_TRY(const uint64_t lo, count(s, "minLength", 0, path));
      MINFER_TRY(const uint64_t hi, count(s, "maxLength", UINT64_MAX, path));
      if (hi < lo) return make_error("JSON Schema: maxLength < minLength at " + path);
      use("ws");
      return add_rule(path + "-string",
                      "\"\\\"\" " + use("char") + repeat(lo, hi) + " \"\\\"\" ws");
    }
    return use("string");
  }

  static std::string repeat(uint64_t lo, uint64_t hi) {
    if (hi == UINT64_MAX) return lo == 0 ? "*" : lo == 1 ? "+" : "{" + std::to_string(lo) + ",}";
    if (lo == hi) return "{" + std::to_string(lo) + "}";
    return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  static Result<uint64_t> count(const Json& s, const char* kw, uint64_t dflt,
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

  Result<std::string> visit_integer(const Json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    constexpr double kLimit = 1e17;
    for (const char* kw : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(kw)) continue;
      const Json& v = s[kw];
      if (!v.is_number())
        return make_error(std::string("JSON Schema: ") + kw + " must be a number at " + path);
      const double d = v.get<double>();
      if (std::fabs(d) > kLimit) {
        return make_error(std::string("JSON Schema: ") + kw + " beyond 1e17 at " + path +
                          " is not supported");
      }
      const std::string k = kw;
      if (k == "minimum" || k == "exclusiveMinimum") {
        auto b = static_cast<int64_t>(k == "minimum" ? std::ceil(d) : std::floor(d) + 1);
        lo = lo ? std::max(*lo, b) : b;
      } else {
        auto b = static_cast<int64_t>(k == "maximum" ? std::floor(d) : std::ceil(d) - 1);
        hi = hi ? std::min(*hi, b) : b;
      }
    }
    if (lo && hi && *lo > *hi) return make_error("JSON Schema: empty integer range at " + path);
    if (s.contains("multipleOf")) return visit_multiple_of(s["multipleOf"], lo, hi, path);
    if (!lo && !hi) return use("integer");
    return add_rule(path + "-int", schema::int_range(lo, hi) + " " + use("ws"));
  }

  // multipleOf m on an integer: a bounded range with few multiples lists them; m = 10^k
  // is a range on the quotient followed by k zeros; unbounded, m in {2, 5} x 10^k is a
  // last-digits rule. Everything else is refused.
  Result<std::string> visit_multiple_of(const Json& mv, std::optional<int64_t> lo,
                                        std::optional<int64_t> hi, const std::string& path) {
    constexpr int64_t kMaxListed = 256;
    const std::string supported =
        " (supported on integer: any m with a minimum and a maximum spanning at most 256 "
        "multiples; m = 10^k with any bounds; m = 2 x 10^k or 5 x 10^k without bounds)";
    if (!mv.is_number() || !(mv.get<double>() > 0)) {
      return make_error("JSON Schema: multipleOf must be a number > 0 at " + path);
    }
    const double md = mv.get<double>();
    if (md != std::floor(md) || md > 1e16) {
      return make_error("JSON Schema: multipleOf " + mv.dump() + " at " + path +
                        " is not supported" + supported);
    }
    const auto m = static_cast<int64_t>(md);
    use("ws");
    // Quotient bounds: ceil(lo / m), floor(hi / m).
    auto div_floor = [](int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0)); };
    std::optional<int64_t> q_lo, q_hi;
    if (lo) q_lo = -div_floor(-*lo, m);
    if (hi) q_hi = div_floor(*hi, m);
    if (q_lo && q_hi && *q_lo > *q_hi) {
      return make_error("JSON Schema: no multiple of " + mv.dump() + " in the range at " + path);
    }
    if (m == 1) {
      if (!lo && !hi) return use("integer");
      return add_rule(path + "-int", schema::int_range(lo, hi) + " ws");
    }
    if (q_lo && q_hi && *q_hi - *q_lo < kMaxListed) {
      std::string out = "(";
      for (int64_t q = *q_lo; q <= *q_hi; ++q) {
        out += (q == *q_lo ? "\"" : " | \"") + std::to_string(q * m) + "\"";
      }
      return add_rule(path + "-multiple", out + ") ws");
    }
    int k = 0;
    int64_t d = m;
    while (d % 10 == 0) {
      d /= 10;
      ++k;
    }
    const std::string zeros = k ? " \"" + std::string(static_cast<size_t>(k), '0') + "\"" : "";
    if (d == 1) {
      std::vector<std::string> alts;
      if ((!q_lo || *q_lo <= 0) && (!q_hi || *q_hi >= 0)) alts.push_back("\"0\"");
      if (!q_hi || *q_hi >= 1) {
        alts.push_back(schema::int_range(std::max<int64_t>(q_lo.value_or(1), 1), q_hi) + zeros);
      }
      if (!q_lo || *q_lo <= -1) {
        alts.push_back(schema::int_range(q_lo, std::min<int64_t>(q_hi.value_or(-1), -1)) + zeros);
      }
      std::string out = "(";
      for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | (" : "(") + alts[i] + ")";
      return add_rule(path + "-multiple", out + ") ws");
    }
    if ((d == 2 || d == 5) && !lo && !hi) {
      const std::string last = d == 2 ? "[02468]" : "[05]";
      const std::string lead = d == 2 ? "[2468]" : "\"5\"";
      // A nonzero multiple: its last digit before the k zeros is in `last`; at most 16
      // digits in all, as the plain integer rule.
      const int free = std::max(0, 16 - k - 2);
      const std::string body = "\"0\" | \"-\"? (" + lead + " | [1-9] [0-9]{0," +
                               std::to_string(free) + "} " + last + ")" + zeros;
      return add_rule(path + "-multiple", "(" + body + ") ws");
    }
    return make_error("JSON Schema: multipleOf " + mv.dump() + " at " + path + " is not supported" +
                      supported);
  }

  // Bounds on a number: the tighter of minimum / exclusiveMinimum (and of the maxima)
  // becomes an exact decimal range without exponent (schema::number_range).
  Result<std::string> visit_number(const Json& s, const std::string& path) {
    if (s.contains("multipleOf")) {
      return make_error("JSON Schema: multipleOf on type number at " + path +
                        " is not supported (only on integer)");
    }
    std::optional<schema::NumberBound> lo, hi;
    for (const char* kw : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(kw)) continue;
      const Json& v = s[kw];
      if (!v.is_number())
        return make_error(std::string("JSON Schema: ") + kw + " must be a number at " + path);
      const std::string k = kw;
      const schema::NumberBound b{
          .value = v.get<double>(), .text = v.dump(), .exclusive = k.rfind("exclusive", 0) == 0};
      const bool is_lo = k == "minimum" || k == "exclusiveMinimum";
      auto& slot = is_lo ? lo : hi;
      // The tighter bound wins; at equal values the exclusive one.
      if (!slot || (is_lo ? b.value > slot->value : b.value < slot->value) ||
          (b.value == slot->value && b.exclusive)) {
        slot = b;
      }
    }
    if (!lo && !hi) return use("number");
    auto range = schema::number_range(lo, hi);
    if (!range.ok()) {
      return make_error("JSON Schema: number bounds at " + path + ": " + range.error().message);
    }
    return add_rule(path + "-num", *range + " " + use("ws"));
  }

  Result<std::string> visit_array(const Json& s, const std::string& path, int depth) {
    use("ws");
    if (s.contains("uniqueItems")) {
      if (!s["uniqueItems"].is_boolean()) {
        return make_error("JSON Schema: uniqueItems must be a boolean at " + path);
      }
      if (s["uniqueItems"].get<bool>()) return visit_unique_array(s, path);
    }
    if (s.contains("prefixItems")) {
      const bool items_false =
          s.contains("items") && s["items"].is_boolean() && !s["items"].get<bool>();
      const Json* items = s.contains("items") && !items_false ? &s["items"] : nullptr;
      return visit_tuple(s, s["prefixItems"], items, path, depth);
    }
    if (s.contains("items") && s["items"].is_array()) {
      // The older tuple form (items: [...]); what follows it is left closed.
      Json closed = s;
      closed["items"] = false;
      return visit_tuple(closed, s["items"], nullptr, path, depth);
    }
    std::string item = use("value");
    if (s.contains("items")) {
      MINFER_TRY(item, visit(s["items"], path + "/items", depth + 1));
    }
    MINFER_TRY(const uint64_t lo, count(s, "minItems", 0, path));
    MINFER_TRY(const uint64_t hi, count(s, "maxItems", UINT64_MAX, path));
    if (hi < lo) return make_error("JSON Schema: maxItems < minItems at " + path);
    std::string body = "\"[\" ws ";
    if (hi == 0) {
      body += "\"]\" ws";
    } else {
      const uint64_t more_lo = lo == 0 ? 0 : lo - 1;
      const uint64_t more_hi = hi == UINT64_MAX ? UINT64_MAX : hi - 1;
      std::string list = item;
      if (more_hi > 0) list += " (\",\" ws " + item + ")" + repeat(more_lo, more_hi);
      body += lo == 0 ? "(" + list + ")? \"]\" ws" : list + " \"]\" ws";
    }
    return add_rule(path + "-array", body);
  }

  // A tuple: item i follows the tuple's schema i; items past the tuple follow `items`
  // (a schema; false: none; absent: any value). Without minItems all tuple items are
  // required, and without maxItems nothing may follow them unless `items` is a schema
  // or minItems asks for more (llama.cpp's reading: a subset of what the schema
  // allows, and the shape a user means). The comma-led rest after k items is built
  // from the inside out, one rule per position.
  Result<std::string> visit_tuple(const Json& s, const Json& tuple, const Json* items,
                                  const std::string& path, int depth) {
    if (!tuple.is_array())
      return make_error("JSON Schema: prefixItems must be an array at " + path);
    static const Json kAny = Json::object();
    const bool closed = s.contains("items") && !items;  // items: false
    const Json* tail = closed ? nullptr : items ? items : &kAny;
    const uint64_t n = tuple.size();
    MINFER_TRY(const uint64_t min_given, count(s, "minItems", 0, path));
    MINFER_TRY(const uint64_t max_given, count(s, "maxItems", UINT64_MAX, path));
    const bool has_min = s.contains("minItems"), has_max = s.contains("maxItems");
    uint64_t hi = has_max ? max_given : closed ? n : items ? UINT64_MAX : std::max(n, min_given);
    const uint64_t lo = has_min ? min_given : std::min(n, hi);
    if (closed && lo > n) {
      return make_error("JSON Schema: minItems larger than prefixItems with items false at " +
                        path + " matches nothing");
    }
    if (hi < lo) return make_error("JSON Schema: maxItems < minItems at " + path);
    if (closed) hi = std::min(hi, n);
    std::vector<std::string> elems;  // the schema of each position up to n (or hi)
    for (uint64_t i = 0; i < n && i < hi; ++i) {
      MINFER_TRY(std::string e, visit(tuple[i], path + "/" + std::to_string(i), depth + 1));
      elems.push_back(e);
    }
    std::string t;
    if (hi > n) {
      MINFER_TRY(t, visit(*tail, path + "/items", depth + 1));
    }
    std::string body = "\"[\" ws ";
    if (hi == 0) return add_rule(path + "-tuple", body + "\"]\" ws");
    // rest(k): what may follow once k >= 1 items are written.
    std::string rest;
    if (hi > n) {
      const uint64_t t_lo = lo > std::max<uint64_t>(n, 1) ? lo - std::max<uint64_t>(n, 1) : 0;
      const uint64_t t_hi = hi == UINT64_MAX ? UINT64_MAX : hi - std::max<uint64_t>(n, 1);
      if (t_hi > 0) rest = "(\",\" ws " + t + ")" + repeat(t_lo, t_hi);
    }
    for (uint64_t k = elems.size(); k-- > 1;) {
      const std::string step = "\",\" ws " + elems[k] + (rest.empty() ? "" : " " + rest);
      rest = add_rule(path + "-tuple-" + std::to_string(k), k >= lo ? "(" + step + ")?" : step);
    }
    const std::string first = (elems.empty() ? t : elems[0]) + (rest.empty() ? "" : " " + rest);
    body += lo == 0 ? "(" + first + ")? " : first + " ";
    return add_rule(path + "-tuple", body + "\"]\" ws");
  }

  static bool is_any(const Json& j) {
    return (j.is_boolean() && j.get<bool>()) || (j.is_object() && j.empty());
  }

  // An object schema `alt` of anyOf / oneOf together with the properties, required
  // and additionalProperties beside the anyOf (in `outer`): one object schema that only
  // accepts objects valid against both. A property only one side declares must be
  // allowed by the other side's additionalProperties (dropped where that is false);
  // nullopt when a required property cannot be written at all.
  Result<std::optional<Json>> merge_object(const Json& outer, const Json& alt_in,
                                           const std::string& path) {
    const Json* alt = &alt_in;
    for (int hops = 0; alt->is_object() && alt->contains("$ref"); ++hops) {
      if (hops > 32 || !(*alt)["$ref"].is_string()) {
        return make_error("JSON Schema: bad $ref at " + path);
      }
      MINFER_TRY(alt, resolve((*alt)["$ref"].get<std::string>(), path));
    }
    static const Json kEmpty = Json::object();
    if (is_any(*alt)) alt = &kEmpty;
    if (!alt->is_object()) return make_error("JSON Schema: a schema must be an object at " + path);
    for (const Json* side : {&outer, alt}) {
      for (const auto& [k, v] : side->items()) {
        if (annotations().count(k) || k == "properties" || k == "required" ||
            k == "additionalProperties" || k == "anyOf" || k == "oneOf" ||
            (k == "type" && v == "object")) {
          continue;
        }
        return make_error("JSON Schema: properties beside anyOf/oneOf at " + path +
                          " merge only into object schemas (properties, required, "
                          "additionalProperties); found '" +
                          k + "'");
      }
    }
    if (alt->contains("anyOf") || alt->contains("oneOf")) {
      return make_error("JSON Schema: nested anyOf/oneOf beside properties at " + path +
                        " is not supported");
    }
    auto props_of = [](const Json& j) {
      return j.contains("properties") && j["properties"].is_object() ? j["properties"] : kEmpty;
    };
    auto addl_of = [](const Json& j) -> const Json* {
      return j.contains("additionalProperties") ? &j["additionalProperties"] : nullptr;
    };
    const Json po = props_of(outer), pa = props_of(*alt);
    const Json* ao = addl_of(outer);
    const Json* aa = addl_of(*alt);
    auto is_false = [](const Json* a) { return a && a->is_boolean() && !a->get<bool>(); };
    Json props = Json::object();
    std::set<std::string> dropped;
    // A property one side declares, checked against the other side's additional schema.
    auto one_side = [&](const std::string& k, const Json& v, const Json* other_addl) -> Status {
      if (is_false(other_addl)) {
        dropped.insert(k);
      } else if (!other_addl || is_any(*other_addl) || *other_addl == v) {
        props[k] = v;
      } else {
        return make_error("JSON Schema: property '" + k + "' at " + path +
                          " meets a different additionalProperties schema across anyOf/oneOf; "
                          "not supported");
      }
      return Ok{};
    };
    for (const auto& [k, v] : po.items()) {
      if (pa.contains(k)) {
        const Json& w = pa[k];
        if (v == w || is_any(w)) {
          props[k] = v;
        } else if (is_any(v)) {
          props[k] = w;
        } else {
          return make_error("JSON Schema: property '" + k + "' at " + path +
                            " has different schemas beside and inside anyOf/oneOf; not supported");
        }
      } else {
        MINFER_TRY_STATUS(one_side(k, v, aa));
      }
    }
    for (const auto& [k, v] : pa.items()) {
      if (!po.contains(k)) MINFER_TRY_STATUS(one_side(k, v, ao));
    }
    Json required = Json::array();
    for (const Json* side : {&outer, alt}) {
      if (!side->contains("required")) continue;
      if (!(*side)["required"].is_array()) {
        return make_error("JSON Schema: required must be an array at " + path);
      }
      for (const auto& r : (*side)["required"]) {
        if (!r.is_string()) return make_error("JSON Schema: required must list strings at " + path);
        const std::string name = r.get<std::string>();
        if (dropped.count(name)) return std::optional<Json>();
        if (!props.contains(name)) {
          return make_error("JSON Schema: required '" + name + "' at " + path +
                            " is not declared in properties beside or inside anyOf/oneOf; not "
                            "supported");
        }
        if (std::find(required.begin(), required.end(), r) == required.end()) required.push_back(r);
      }
    }
    Json merged = {{"type", "object"}, {"properties", props}, {"required", required}};
    if (is_false(ao) || is_false(aa)) {
      merged["additionalProperties"] = false;
    } else if (ao && aa && !is_any(*ao) && !is_any(*aa) && *ao != *aa) {
      return make_error(
          "JSON Schema: different additionalProperties beside and inside "
          "anyOf/oneOf at " +
          path + "; not supported");
    } else if (ao && !is_any(*ao)) {
      merged["additionalProperties"] = *ao;
    } else if (aa && !is_any(*aa)) {
      merged["additionalProperties"] = *aa;
    } else if ((ao && is_any(*ao)) || (aa && is_any(*aa))) {
      merged["additionalProperties"] = true;
    }
    return std::optional<Json>(std::move(merged));
  }

  // uniqueItems over items from a small finite set (enum, const, boolean, null): one
  // rule per subset of values already written, so no value comes twice.
  Result<std::string> visit_unique_array(const Json& s, const std::string& path) {
    constexpr size_t kMaxValues = 8;
    const std::string refuse =
        "JSON Schema: uniqueItems at " + path +
        " is supported only for items from a small finite set (enum, const, boolean or null; "
        "at most " +
        std::to_string(kMaxValues) + " values), without prefixItems";
    if (s.contains("prefixItems") || !s.contains("items") || s["items"].is_array()) {
      return make_error(refuse);
    }
    const Json* it = &s["items"];
    for (int hops = 0; it->is_object() && it->contains("$ref"); ++hops) {
      if (hops > 32 || !(*it)["$ref"].is_string()) return make_error(refuse);
      MINFER_TRY(it, resolve((*it)["$ref"].get<std::string>(), path));
    }
    if (!it->is_object()) return make_error(refuse);
    std::vector<Json> values;
    if (it->contains("enum") && (*it)["enum"].is_array()) {
      MINFER_TRY_STATUS(check_keywords(*it, {"enum", "type"}, path + "/items"));
      for (const auto& v : (*it)["enum"]) values.push_back(v);
    } else if (it->contains("const")) {
      MINFER_TRY_STATUS(check_keywords(*it, {"const", "type"}, path + "/items"));
      values.push_back((*it)["const"]);
    } else if (it->contains("type") && (*it)["type"] == "boolean" && it->size() == 1) {
      values = {Json(false), Json(true)};
    } else if (it->contains("type") && (*it)["type"] == "null" && it->size() == 1) {
      values = {Json(nullptr)};
    } else {
      return make_error(refuse);
    }
    // Equal JSON values (1 and 1.0 too) are one value.
    std::vector<Json> distinct;
    for (const auto& v : values) {
      if (std::find(distinct.begin(), distinct.end(), v) == distinct.end()) distinct.push_back(v);
    }
    if (distinct.size() > kMaxValues) return make_error(refuse);
    const size_t k = distinct.size();
    MINFER_TRY(const uint64_t lo, count(s, "minItems", 0, path));
    MINFER_TRY(uint64_t hi, count(s, "maxItems", UINT64_MAX, path));
    if (hi < lo) return make_error("JSON Schema: maxItems < minItems at " + path);
    if (lo > k) {
      return make_error("JSON Schema: minItems " + std::to_string(lo) + " at " + path +
                        " is more than the " + std::to_string(k) +
                        " distinct values uniqueItems allows");
    }
    hi = std::min<uint64_t>(hi, k);
    std::vector<std::string> lits;
    for (const auto& v : distinct) lits.push_back(json_literal(v) + " ws");
    // after(S): what may follow once the values in S are written.
    std::map<uint32_t, std::string> memo;
    auto after = [&](auto&& self, uint32_t used) -> std::string {
      auto m = memo.find(used);
      if (m != memo.end()) return m->second;
      const auto n_used = static_cast<uint64_t>(std::popcount(used));
      std::vector<std::string> alts;
      if (n_used >= lo) alts.push_back("\"\"");
      if (n_used < hi) {
        for (size_t i = 0; i < k; ++i) {
          if (used & (1u << i)) continue;
          alts.push_back("\",\" ws " + lits[i] + " " + self(self, used | (1u << i)));
        }
      }
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
      const std::string name = add_rule(path + "-unique-" + std::to_string(used), body);
      memo[used] = name;
      return name;
    };
    std::string body = "\"[\" ws ";
    if (hi > 0) {
      std::string first = "(";
      for (size_t i = 0; i < k; ++i) {
        first += (i ? " | " : "") + lits[i] + " " + after(after, 1u << i);
      }
      first += ")";
      body += lo == 0 ? first + "? " : first + " ";
    }
    return add_rule(path + "-unique", body + "\"]\" ws");
  }

  Result<std::string> visit_all_of(const Json& s, const std::string& path, int depth) {
    MINFER_TRY_STATUS(check_keywords(
        s, {"allOf", "type", "properties", "required", "additionalProperties"}, path));
    if (!s["allOf"].is_array() || s["allOf"].empty()) {
      return make_error("JSON Schema: allOf must be a non-empty array at " + path);
    }
    // allOf of one schema (and nothing beside it) is that schema.
    bool alone = true;
    for (const auto& [k, v] : s.items()) alone = alone && (k == "allOf" || annotations().count(k));
    if (alone && s["allOf"].size() == 1) return visit(s["allOf"][0], path + "/allOf/0", depth + 1);
    // allOf of enums / consts: the values common to all of them.
    std::vector<const Json*> resolved;
    bool all_enums = alone;
    for (const auto& p : s["allOf"]) {
      const Json* r = &p;
      for (int hops = 0; r->is_object() && r->contains("$ref"); ++hops) {
        if (hops > 32) return make_error("JSON Schema: $ref chain too long at " + path);
        if (!(*r)["$ref"].is_string()) {
          return make_error("JSON Schema: $ref must be a string at " + path);
        }
        MINFER_TRY(r, resolve((*r)["$ref"].get<std::string>(), path));
      }
      resolved.push_back(r);
      all_enums = all_enums && r->is_object() && (r->contains("enum") || r->contains("const"));
    }
    if (all_enums) {
      std::vector<Json> common;
      for (size_t i = 0; i < resolved.size(); ++i) {
        const Json& r = *resolved[i];
        MINFER_TRY_STATUS(check_keywords(r, {"enum", "const", "type"}, path));
        std::vector<Json> values;
        if (r.contains("const")) values.push_back(r["const"]);
        if (r.contains("enum") && r["enum"].is_array()) {
          for (const auto& v : r["enum"]) values.push_back(v);
        }
        if (i == 0) {
          common = values;
          continue;
        }
        std::vector<Json> kept;
        for (const auto& c : common) {
          if (std::find(values.begin(), values.end(), c) != values.end()) kept.push_back(c);
        }
        common = std::move(kept);
      }
      if (common.empty()) {
        return make_error("JSON Schema: allOf at " + path + " has no common enum value");
      }
      std::string out = "(";
      for (size_t i = 0; i < common.size(); ++i) {
        out += (i ? " | " : "") + json_literal(common[i]);
      }
      return out + ") " + use("ws");
    }
    std::vector<std::pair<std::string, const Json*>> props;
    std::set<std::string> required;
    const Json* additional =
        s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    std::vector<const Json*> parts = {&s};
    for (const auto& p : s["allOf"]) parts.push_back(&p);
    for (size_t i = 0; i < parts.size(); ++i) {
      const Json* p = parts[i];
      int hops = 0;
      while (p->is_object() && p->contains("$ref")) {
        if (++hops > 32) return make_error("JSON Schema: $ref chain too long at " + path);
        MINFER_TRY(p, resolve((*p)["$ref"].get<std::string>(), path));
      }
      if (!p->is_object()) return make_error("JSON Schema: allOf items must be objects at " + path);
      if (i > 0) {
        for (const auto& [k, v] : p->items()) {
          if (annotations().count(k) || k == "properties" || k == "required" ||
              (k == "type" && v == "object")) {
            continue;
          }
          return make_error("JSON Schema: allOf at " + path +
                            " supports only object schemas "
                            "(properties, required); found '" +
                            k + "'");
        }
      }
      if (p->contains("properties")) {
        for (const auto& [k, v] : (*p)["properties"].items()) {
          bool seen = false;
          for (const auto& e : props) seen = seen || e.first == k;
          if (seen)
            return make_error("JSON Schema: allOf at " + path + " defines property '" + k +
                              "' twice");
          props.emplace_back(k, &v);
        }
      }
      if (p->contains("required")) {
        for (const auto& r : (*p)["required"]) required.insert(r.get<std::string>());
      }
    }
    return build_object(props, required, additional, path, depth);
  }

  Result<std::string> build_object(const std::vector<std::pair<std::string, const Json*>>& props,
                                   const std::set<std::string>& required, const Json* additional,
                                   const std::string& path, int depth, uint64_t min_props = 0,
                                   uint64_t max_props = UINT64_MAX) {
    use("ws");
    static const Json kAny = Json::object();
    // Required ones first, then the optional ones, each in schema order.
    std::vector<std::pair<std::string, const Json*>> order;
    std::vector<bool> is_req;
    for (const auto& p : props) {
      if (required.count(p.first)) {
        order.push_back(p);
        is_req.push_back(true);
      }
    }
    for (const auto& r : required) {
      bool declared = false;
      for (const auto& p : props) declared = declared || p.first == r;
      if (!declared) {
        order.emplace_back(r, &kAny);
        is_req.push_back(true);
      }
    }
    for (const auto& p : props) {
      if (!required.count(p.first)) {
        order.push_back(p);
        is_req.push_back(false);
      }
    }
    std::vector<std::string> kvs;
    for (const auto& [name, sub] : order) {
      MINFER_TRY(std::string v, visit(*sub, path + "/" + name, depth + 1));
      kvs.push_back(
          add_rule(path + "-" + name + "-kv", json_literal(Json(name)) + " ws \":\" ws " + v));
    }
    // Additional properties: allowed when additionalProperties is true or a schema, or
    // when it is absent and no property is declared ({"type": "object"}).
    std::string extra;
    const bool allow_extra = additional ? !(additional->is_boolean() && !additional->get<bool>())
                                        : props.empty() && required.empty();
    if (allow_extra) {
      std::string value = use("value");
      if (additional && additional->is_object()) {
        MINFER_TRY(value, visit(*additional, path + "/additionalProperties", depth + 1));
      }
      std::vector<std::string> names;
      for (const auto& o : order) names.push_back(o.first);
      const std::string key =
          names.empty() ? use("string")
                        : add_rule(path + "-additional-key", schema::string_not_in(names) + " ws");
      use("char");
      extra = add_rule(path + "-additional-kv", key + " \":\" ws " + value);
    }
    if (min_props > 0 || max_props != UINT64_MAX) {
      return counted_object(kvs, is_req, extra, min_props, max_props, path);
    }
    // S_j: items j.. with none written yet; T_j: items j.. after one was written.
    const size_t n = kvs.size();
    std::vector<std::string> t(n + 1), sname(n + 1);
    t[n] = extra.empty() ? "" : add_rule(path + "-rest", "(\",\" ws " + extra + ")*");
    sname[n] = extra.empty()
                   ? ""
                   : add_rule(path + "-first", "(" + extra + " (\",\" ws " + extra + ")*)?");
    for (size_t j = n; j-- > 0;) {
      const std::string tail = t[j + 1].empty() ? "" : " " + t[j + 1];
      const std::string body_t =
          is_req[j] ? "\",\" ws " + kvs[j] + tail : "(\",\" ws " + kvs[j] + ")?" + tail;
      t[j] = add_rule(path + "-after-" + std::to_string(j), body_t);
      std::string body_s = kvs[j] + (t[j + 1].empty() ? "" : " " + t[j + 1]);
      if (!is_req[j]) body_s += sname[j + 1].empty() ? " | \"\"" : " | " + sname[j + 1];
      sname[j] = add_rule(path + "-from-" + std::to_string(j), body_s);
    }
    const std::string inner = sname[0].empty() ? "" : sname[0] + " ";
    return add_rule(path + "-object", "\"{\" ws " + inner + "\"}\" ws");
  }

  // An object with minProperties / maxProperties: the states of build_object, also
  // counting the declared properties written. Additional properties count toward the
  // maximum only: two of them may share a key, and a parser keeps one, so they cannot
  // be relied on to reach a minimum.
  Result<std::string> counted_object(const std::vector<std::string>& kvs,
                                     const std::vector<bool>& is_req, const std::string& extra,
                                     uint64_t min_props, uint64_t max_props,
                                     const std::string& path) {
    const size_t n = kvs.size();
    if (min_props > n) {
      return make_error("JSON Schema: minProperties " + std::to_string(min_props) + " at " + path +
                        " is more than the declared properties (" + std::to_string(n) +
                        "); additional properties are not counted toward it, as their keys "
                        "could repeat");
    }
    auto join = [](const std::string& a, const std::string& b) {
      return a.empty() ? b : b.empty() ? a : a + " " + b;
    };
    // Extras after c declared ones (k of the comma-led form, or the first without).
    auto extras = [&](uint64_t c, bool first) -> std::string {
      if (extra.empty() || c >= max_props) return "";
      const uint64_t room = max_props == UINT64_MAX ? UINT64_MAX : max_props - c;
      if (!first) return "(\",\" ws " + extra + ")" + repeat(0, room);
      if (room == 1) return "(" + extra + ")?";
      return "(" + extra + " (\",\" ws " + extra + ")" +
             repeat(0, room == UINT64_MAX ? room : room - 1) + ")?";
    };
    // T(j, c): properties j.. after c >= 1 declared ones; nullopt when it cannot end
    // within the bounds. S(j): properties j.. with none written.
    std::map<std::pair<size_t, uint64_t>, std::optional<std::string>> memo_t;
    auto t_state = [&](auto&& self, size_t j, uint64_t c) -> std::optional<std::string> {
      if (c > max_props || c + (n - j) < min_props) return std::nullopt;
      auto it = memo_t.find({j, c});
      if (it != memo_t.end()) return it->second;
      std::optional<std::string> out;
      if (j == n) {
        out = extras(c, false);
      } else {
        std::vector<std::string> alts;
        if (auto take = self(self, j + 1, c + 1)) alts.push_back(join("\",\" ws " + kvs[j], *take));
        if (!is_req[j]) {
          if (auto skip = self(self, j + 1, c)) alts.push_back(skip->empty() ? "\"\"" : *skip);
        }
        if (!alts.empty()) {
          std::string body;
          for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
          out = add_rule(path + "-count-" + std::to_string(j) + "-" + std::to_string(c), body);
        }
      }
      memo_t[{j, c}] = out;
      return out;
    };
    std::optional<std::string> s_next;  // S(n), then S(j) from the inside out
    if (min_props == 0) s_next = extras(0, true);
    for (size_t j = n; j-- > 0;) {
      std::vector<std::string> alts;
      if (max_props >= 1) {
        if (auto take = t_state(t_state, j + 1, 1)) alts.push_back(join(kvs[j], *take));
      }
      if (!is_req[j] && s_next) alts.push_back(s_next->empty() ? "\"\"" : *s_next);
      if (alts.empty()) {
        s_next.reset();
        continue;
      }
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
      s_next = add_rule(path + "-count-first-" + std::to_string(j), body);
    }
    if (!s_next) {
      return make_error("JSON Schema: no object at " + path +
                        " meets minProperties/maxProperties with its required properties");
    }
    return add_rule(path + "-object", join("\"{\" ws", *s_next) + " \"}\" ws");
  }

  const Json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(std::string_view schema) {
  Json root;
  try {
    root = Json::parse(schema.begin(), schema.end());
  } catch (const nlohmann::json::exception& e) {
    return make_error(std::string("JSON Schema: not valid JSON: ") + e.what());
  }
  Converter c(root);
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
