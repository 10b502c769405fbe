// Micro-benchmark (not a test) of grammar token masks: the cost per decode step of
// the mask for a JSON-Schema grammar over a real vocabulary (GPT-2, 50257 tokens).
// A fixed JSON document is tokenized and replayed as if sampled; at every step the
// mask is computed, then the token accepted. Four ways, each printed as
// mean / median / p99 / max microseconds per step:
//   cold       fresh StateTable and masker: every state and transition is new
//   walk       transitions memoised, mask cache empty: the pure trie walk
//   cached     the same document again: masks come from the per-state cache
//   per-token  every token checked on its own (what a mask costs without the trie)
// and the cost of allows(sampled token), the check that makes a full mask unneeded
// when the sampled token is allowed.
//   build: cmake --build BUILD --target grammar_mask_bench
//   run:   BUILD/tests/grammar/grammar_mask_bench [VOCAB.gguf]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

using namespace minfer;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 64},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email_verified": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {
      "street": {"type": "string"}, "city": {"type": "string"},
      "zip": {"type": "string", "pattern": "^[A-Z0-9 ]{3,10}$"}},
      "required": ["street", "city"]},
    "notes": {"type": "string"}
  },
  "required": ["name", "age"]
})";

constexpr const char* kDocument =
    R"({"name": "Ada Lovelace", "age": 36, "email_verified": true, "tags": ["math", )"
    R"("poetry", "engines"], "address": {"street": "12 St James's Square", "city": )"
    R"("London", "zip": "SW1Y 4JH"}, "notes": "First published algorithm; \"Note G\" )"
    R"(computes Bernoulli numbers, in 1843."})";

struct Timing {
  std::vector<double> us;
  void add(Clock::duration d) {
    us.push_back(std::chrono::duration<double, std::micro>(d).count());
  }
  void print(const char* what) {
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double v : us) sum += v;
    std::printf("%-10s mean %9.1f  median %9.1f  p99 %9.1f  max %9.1f  us/step  (%zu steps)\n",
                what, sum / static_cast<double>(us.size()), us[us.size() / 2],
                us[std::min(us.size() - 1, us.size() * 99 / 100)], us.back(), us.size());
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 ? argv[1] : std::string(MINFER_TESTDATA_DIR) + "/vocab/ggml-vocab-gpt-2.gguf";
  auto model = gguf::Model::open(path);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.error().message.c_str()), 1;
  auto tok = tokenizer::Tokenizer::from_gguf(*model);
  if (!tok.ok()) return std::fprintf(stderr, "%s\n", tok.error().message.c_str()), 1;
  auto t0 = Clock::now();
  const auto vocab = grammar::TokenVocab::build(**tok);
  const double trie_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  auto gbnf = grammar::json_schema_to_gbnf(kSchema);
  if (!gbnf.ok()) return std::fprintf(stderr, "%s\n", gbnf.error().message.c_str()), 1;
  auto g = grammar::Grammar::parse(*gbnf);
  if (!g.ok()) return std::fprintf(stderr, "%s\n", g.error().message.c_str()), 1;
  auto ids = (*tok)->encode(kDocument, {.add_special = false});
  if (!ids.ok()) return std::fprintf(stderr, "%s\n", ids.error().message.c_str()), 1;
  std::printf("vocab %s: %d tokens, trie %zu nodes built in %.1f ms; document: %zu tokens\n",
              path.c_str(), vocab->n_vocab(), vocab->n_nodes(), trie_ms, ids->size());

  // One replay of the document; per-step times go to `t`.
  auto run = [&](grammar::Matcher& m, grammar::TokenMasker& masker, std::vector<double>& t,
                 bool brute) {
    m.reset();
    for (size_t i = 0; i < ids->size(); ++i) {
      const tokenizer::TokenId id = (*ids)[i];
      const auto start = Clock::now();
      if (brute) {
        (void)masker.mask_brute_force(m);
      } else {
        auto mk = masker.mask(m);
        if (!mk.ok()) return std::fprintf(stderr, "%s\n", mk.error().message.c_str()), false;
      }
      t[i] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (!masker.accept_token(m, id)) {
        std::fprintf(stderr, "token %d '%s' rejected\n", id, vocab->bytes(id).c_str());
        return false;
      }
    }
    if (!m.can_end()) return std::fprintf(stderr, "document incomplete\n"), false;
    return true;
  };
  // The machine may be shared: every way runs kReps times and each step keeps its
  // fastest time.
  constexpr int kReps = 7;
  const size_t n = ids->size();
  Timing cold, walk, cached, brute, allows;
  for (Timing* t : {&cold, &walk, &cached, &brute, &allows}) t->us.assign(n, 1e300);
  auto keep_min = [&](Timing& t, const std::vector<double>& v) {
    for (size_t i = 0; i < n; ++i) t.us[i] = std::min(t.us[i], v[i]);
  };
  std::vector<double> v(n);
  size_t n_sets = 0, n_dfa = 0;
  double nodes_per_mask = 0, allowed_per_step = 0;
  for (int rep = 0; rep < kReps; ++rep) {
    auto m = grammar::Matcher::create(*g);
    if (!m.ok()) return std::fprintf(stderr, "%s\n", m.error().message.c_str()), 1;
    grammar::TokenMasker masker(m->table_ptr(), vocab);
    if (!run(*m, masker, v, false)) return 1;
    keep_min(cold, v);
    n_sets = m->table().n_sets();
    n_dfa = m->table().n_dfa_states();
    nodes_per_mask = static_cast<double>(masker.stats().nodes_visited) /
                     static_cast<double>(masker.stats().masks_computed);
    grammar::TokenMasker fresh(m->table_ptr(), vocab);
    if (!run(*m, fresh, v, false)) return 1;
    keep_min(walk, v);
    if (!run(*m, fresh, v, false)) return 1;
    keep_min(cached, v);
    if (rep < 2) {
      if (!run(*m, fresh, v, true)) return 1;
      keep_min(brute, v);
    }
    m->reset();
    size_t allowed = 0;
    for (size_t i = 0; i < n; ++i) {
      const auto start = Clock::now();
      const bool ok = fresh.allows(*m, (*ids)[i]);
      v[i] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      allowed += (*fresh.mask(*m))->count();
      if (!ok || !fresh.accept_token(*m, (*ids)[i]))
        return std::fprintf(stderr, "allows failed\n"), 1;
    }
    keep_min(allows, v);
    allowed_per_step = static_cast<double>(allowed) / static_cast<double>(n);
  }
  std::printf(
      "grammar: %zu stack sets, %zu byte-automaton states; %.0f trie nodes visited "
      "per computed mask; %.0f tokens allowed per step on average\n",
      n_sets, n_dfa, nodes_per_mask, allowed_per_step);
  std::printf("per decode step, fastest of %d runs per step:\n", kReps);
  cold.print("cold");
  walk.print("walk");
  cached.print("cached");
  brute.print("per-token");
  allows.print("allows");
  return 0;
}
