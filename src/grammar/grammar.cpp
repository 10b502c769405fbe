// Stage 14b: checks a parsed rule table and flattens it into a Grammar.
// Left recursion: the matcher expands a rule reference by pushing what follows it
// and the referenced rule's first element, so a rule that can reach itself at its
// start (through nullable prefixes) while something follows grows the stack without
// consuming input. Cycles whose every step is a tail reference (as in `( [x]* )*`)
// only revisit the same stacks and terminate, so they are allowed.
#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_set>
#include <vector>

#include "grammar/grammar_builder.h"

namespace minfer::grammar {

bool CharClass::contains(uint32_t cp) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const auto& r) { return v < r.first; });
  if (it == ranges.begin()) return false;
  --it;
  return cp <= it->second;
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), hi,
                             [](uint32_t v, const auto& r) { return v < r.first; });
  if (it == ranges.begin()) return false;
  --it;  // the last range starting at or before hi
  return it->second >= lo;
}

namespace {

bool ends_alt(ElemKind k) {
  return k == ElemKind::kEnd || k == ElemKind::kAlt;
}

struct Edge {
  uint32_t to;
  bool cont;  // something follows the reference in its alternative
};

// Strongly connected components (Tarjan), iterative: generated rule chains can be
// thousands deep.
std::vector<uint32_t> sccs(const std::vector<std::vector<Edge>>& g) {
  const size_t n = g.size();
  constexpr uint32_t kNone = UINT32_MAX;
  std::vector<uint32_t> index(n, kNone), low(n, 0), comp(n, kNone);
  std::vector<bool> on(n, false);
  std::vector<uint32_t> st;
  std::vector<std::pair<uint32_t, size_t>> call;
  uint32_t next = 0, n_comp = 0;
  for (uint32_t s = 0; s < n; ++s) {
    if (index[s] != kNone) continue;
    call.emplace_back(s, 0);
    index[s] = low[s] = next++;
    st.push_back(s);
    on[s] = true;
    while (!call.empty()) {
      auto& [v, i] = call.back();
      if (i < g[v].size()) {
        const uint32_t w = g[v][i++].to;
        if (index[w] == kNone) {
          index[w] = low[w] = next++;
          st.push_back(w);
          on[w] = true;
          call.emplace_back(w, 0);
        } else if (on[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const uint32_t done = v;
      if (low[done] == index[done]) {
        while (true) {
          const uint32_t w = st.back();
          st.pop_back();
          on[w] = false;
          comp[w] = n_comp;
          if (w == done) break;
        }
        ++n_comp;
      }
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
    }
  }
  return comp;
}

Status check_left_recursion(const Grammar::Builder& b) {
  const size_t n = b.rules.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      bool alt_ok = true;
      for (const Elem& e : b.rules[r].body) {
        if (ends_alt(e.kind)) {
          if (alt_ok) break;
          alt_ok = true;
          continue;
        }
        if (e.kind == ElemKind::kChars || !nullable[e.value]) alt_ok = false;
      }
      if (alt_ok) {
        nullable[r] = true;
        changed = true;
      }
    }
  }
  std::vector<std::vector<Edge>> g(n);
  for (size_t r = 0; r < n; ++r) {
    const auto& body = b.rules[r].body;
    bool at_start = true;
    for (size_t i = 0; i < body.size(); ++i) {
      const Elem& e = body[i];
      if (ends_alt(e.kind)) {
        at_start = true;
        continue;
      }
      if (!at_start) continue;
      if (e.kind == ElemKind::kChars) {
        at_start = false;
        continue;
      }
      g[r].push_back({e.value, !ends_alt(body[i + 1].kind)});
      if (!nullable[e.value]) at_start = false;
    }
  }
  const std::vector<uint32_t> comp = sccs(g);
  for (uint32_t r = 0; r < n; ++r) {
    for (const Edge& e : g[r]) {
      if (e.cont && comp[e.to] == comp[r]) {
        const auto& rule = b.rules[r];
        const auto& named = rule.generated ? b.rules[rule.owner] : rule;
        return make_error(b.where(named.def_at) + ": left recursion: rule '" + named.name +
                          "' can reach itself before consuming input");
      }
    }
  }
  return Ok{};
}

}  // namespace

Result<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view text,
                                                      std::string_view root) {
  Builder b;
  b.src = text;
  MINFER_TRY_STATUS(parse_gbnf_rules(b));
  if (b.rules.empty()) return make_error("1:1: empty grammar (no rules)");
  for (const auto& r : b.rules) {
    if (!r.defined) return make_error(b.where(r.ref_at) + ": undefined rule '" + r.name + "'");
  }
  auto it = b.ids.find(std::string(root));
  if (it == b.ids.end()) {
    return make_error("1:1: the grammar has no '" + std::string(root) + "' rule");
  }
  MINFER_TRY_STATUS(check_left_recursion(b));

  auto g = std::shared_ptr<Grammar>(new Grammar());
  g->root_ = it->second;
  g->classes_ = std::move(b.classes);
  g->rule_start_.reserve(b.rules.size());
  g->alts_.resize(b.rules.size());
  // Generated names ("owner-N") must not clash with a rule the text defines, so that
  // to_gbnf() prints a grammar that parses back.
  std::unordered_set<std::string> used;
  for (const auto& r : b.rules) {
    if (!r.generated) used.insert(r.name);
  }
  for (size_t r = 0; r < b.rules.size(); ++r) {
    g->rule_start_.push_back(static_cast<uint32_t>(g->elems_.size()));
    std::string name = b.rules[r].name;
    if (b.rules[r].generated) {
      while (!used.insert(name).second) name += "_";
    }
    g->names_.push_back(std::move(name));
    g->alts_[r].push_back(static_cast<uint32_t>(g->elems_.size()));
    const auto& body = b.rules[r].body;
    for (size_t i = 0; i < body.size(); ++i) {
      g->elems_.push_back(body[i]);
      if (body[i].kind == ElemKind::kAlt) {
        g->alts_[r].push_back(static_cast<uint32_t>(g->elems_.size()));
      }
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

namespace {

void append_cp(std::string& out, uint32_t cp, bool in_class) {
  if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'))) {
    if (cp == '-' || cp == '^') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", cp);
      out += buf;
    } else {
      out += '\\';
      out += static_cast<char>(cp);
    }
  } else if (cp >= 0x20 && cp < 0x7F) {
    out += static_cast<char>(cp);
  } else {
    char buf[16];
    if (cp <= 0xFF) {
      std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    } else if (cp <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08X", cp);
    }
    out += buf;
  }
}

}  // namespace

std::string Grammar::to_gbnf() const {
  std::string out;
  for (size_t r = 0; r < rule_start_.size(); ++r) {
    out += names_[r] + " ::=";
    bool alt_empty = true;
    for (size_t i = rule_start_[r];; ++i) {
      const Elem& e = elems_[i];
      if (e.kind == ElemKind::kAlt || e.kind == ElemKind::kEnd) {
        if (alt_empty) out += " \"\"";  // an empty alternative
        if (e.kind == ElemKind::kEnd) break;
        out += " |";
        alt_empty = true;
        continue;
      }
      alt_empty = false;
      if (false) {
      } else if (e.kind == ElemKind::kRef) {
        out += " " + names_[e.value];
      } else {
        const CharClass& c = classes_[e.value];
        if (c.ranges.size() == 1 && c.ranges[0].first == c.ranges[0].second) {
          out += " \"";
          append_cp(out, c.ranges[0].first, false);
          out += "\"";
        } else {
          out += " [";
          for (const auto& [lo, hi] : c.ranges) {
            append_cp(out, lo, true);
            if (hi != lo) {
              out += "-";
              append_cp(out, hi, true);
            }
          }
          out += "]";
        }
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace minfer::grammar
