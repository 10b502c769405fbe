// Stage 14b: JSON Schema → GBNF, objects (schema_converter.h): required properties
// first, then the optional ones, each in schema order, then additional properties
// (keys other than the declared ones) when additionalProperties allows them; with
// minProperties / maxProperties the states also count the properties written.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grammar/schema_converter.h"
#include "grammar/schema_internal.h"

namespace minfer::grammar::schema {

// type "object" (also implied by properties, required, additionalProperties,
// minProperties, maxProperties).
Result<std::string> Converter::visit_object(const Json& s, const std::string& path, int depth) {
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
      if (!r.is_string()) return make_error("JSON Schema: required must list strings at " + path);
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

Result<std::string> Converter::build_object(
    const std::vector<std::pair<std::string, const Json*>>& props,
    const std::set<std::string>& required, const Json* additional, const std::string& path,
    int depth, uint64_t min_props, uint64_t max_props) {
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
    const std::string key = names.empty()
                                ? use("string")
                                : add_rule(path + "-additional-key", string_not_in(names) + " ws");
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
  sname[n] =
      extra.empty() ? "" : add_rule(path + "-first", "(" + extra + " (\",\" ws " + extra + ")*)?");
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
Result<std::string> Converter::counted_object(const std::vector<std::string>& kvs,
                                              const std::vector<bool>& is_req,
                                              const std::string& extra, uint64_t min_props,
                                              uint64_t max_props, const std::string& path) {
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

}  // namespace minfer::grammar::schema
