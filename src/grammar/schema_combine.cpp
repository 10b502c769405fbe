// Stage 14b: JSON Schema → GBNF, the combinators (schema_converter.h): anyOf / oneOf
// (oneOf generated as anyOf; properties beside them merged into each alternative) and
// allOf (of object schemas: one object; of enums / consts: their common values).
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grammar/schema_converter.h"

namespace minfer::grammar::schema {

// anyOf / oneOf (`kw`): one alternative per branch; properties, required and
// additionalProperties beside it are merged into each branch (merge_object), and a
// branch that cannot hold them is left out.
Result<std::string> Converter::visit_any_of(const Json& s, const char* kw, const std::string& path,
                                            int depth) {
  MINFER_TRY_STATUS(
      check_keywords(s, {kw, "type", "properties", "required", "additionalProperties"}, path));
  const Json& alts = s[kw];
  if (!alts.is_array() || alts.empty()) {
    return make_error(std::string("JSON Schema: ") + kw + " must be a non-empty array at " + path);
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

bool Converter::is_any(const Json& j) {
  return (j.is_boolean() && j.get<bool>()) || (j.is_object() && j.empty());
}

// An object schema `alt` of anyOf / oneOf together with the properties, required
// and additionalProperties beside the anyOf (in `outer`): one object schema that only
// accepts objects valid against both. A property only one side declares must be
// allowed by the other side's additionalProperties (dropped where that is false);
// nullopt when a required property cannot be written at all.
Result<std::optional<Json>> Converter::merge_object(const Json& outer, const Json& alt_in,
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

Result<std::string> Converter::visit_all_of(const Json& s, const std::string& path, int depth) {
  MINFER_TRY_STATUS(
      check_keywords(s, {"allOf", "type", "properties", "required", "additionalProperties"}, path));
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

}  // namespace minfer::grammar::schema
