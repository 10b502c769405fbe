// Stage 14b: JSON Schema → GBNF, arrays (schema_converter.h): items with minItems /
// maxItems, tuples (prefixItems, and the older array form of items) and uniqueItems
// over a small finite set of values.
#include <algorithm>
#include <bit>
#include <map>
#include <string>
#include <vector>

#include "grammar/schema_converter.h"

namespace minfer::grammar::schema {

Result<std::string> Converter::visit_array(const Json& s, const std::string& path, int depth) {
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
Result<std::string> Converter::visit_tuple(const Json& s, const Json& tuple, const Json* items,
                                           const std::string& path, int depth) {
  if (!tuple.is_array()) return make_error("JSON Schema: prefixItems must be an array at " + path);
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
    return make_error("JSON Schema: minItems larger than prefixItems with items false at " + path +
                      " matches nothing");
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

// uniqueItems over items from a small finite set (enum, const, boolean, null): one
// rule per subset of values already written, so no value comes twice.
Result<std::string> Converter::visit_unique_array(const Json& s, const std::string& path) {
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

}  // namespace minfer::grammar::schema
