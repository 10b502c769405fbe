// Stage 17 (HTTP) / 18 (CLI): grammar constraint (src/grammar's matcher and token masks).
#include "server/constraint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace minfer::server {
namespace {

// The last bytes of the output, printable, for the "[grammar]" error.
std::string tail_for_error(const std::string& out) {
  constexpr size_t kTail = 48;
  const std::string t = out.size() > kTail ? out.substr(out.size() - kTail) : out;
  std::string s;
  for (unsigned char c : t) {
    if (c == '\n') {
      s += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      s += fmt::format("\\x{:02x}", c);
    } else {
      s += static_cast<char>(c);
    }
  }
  return (out.size() > kTail ? "..." : "") + s;
}

class GrammarConstraint final : public engine::TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<grammar::StateTable> table,
                    std::shared_ptr<const grammar::TokenVocab> vocab)
      : matcher_(table), masker_(table, std::move(vocab)) {}

  Status apply(std::span<float> logits) override {
    auto mask_or = masker_.mask(matcher_);
    if (!mask_or.ok()) return make_error("[grammar] " + mask_or.error().message);
    const grammar::TokenMask* mask = *mask_or;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    // Word by word: a word with no allowed token is 64 stores, a full one none.
    const size_t n = logits.size();
    const size_t n_words = std::min(mask->bits.size(), (n + 63) / 64);
    float* l = logits.data();
    bool any = false;
    for (size_t w = 0; w < n_words; ++w) {
      const uint64_t bits = mask->bits[w];
      const size_t base = w * 64;
      const size_t len = std::min<size_t>(64, n - base);
      if (bits == 0) {
        std::fill(l + base, l + base + len, kNegInf);
        continue;
      }
      if (any && len == 64 && bits == ~uint64_t{0}) continue;
      for (size_t k = 0; k < len; ++k) {
        if ((bits >> k) & 1) {
          if (!any && !std::isnan(l[base + k]) && l[base + k] != kNegInf) any = true;
        } else {
          l[base + k] = kNegInf;
        }
      }
    }
    if (n_words * 64 < n) std::fill(l + n_words * 64, l + n, kNegInf);
    const auto n_mask = static_cast<tokenizer::TokenId>(mask->bits.size() * 64);
    if (!any) {
      // Nothing the sampler could draw: say why instead of letting it fail (or pick).
      bool eog_allowed = false;
      for (tokenizer::TokenId e : masker_.vocab().eog_ids()) {
        if (e < n_mask && mask->test(e)) eog_allowed = true;
      }
      const std::string at = output_.empty() ? "at the start of the output"
                                             : fmt::format("after \"{}\"", tail_for_error(output_));
      if (eog_allowed) {
        return make_error(fmt::format(
            "[grammar] no token is allowed {}: the grammar is complete and only "
            "end-of-generation may come next, but end-of-generation is banned (ignore_eos / "
            "--ignore-eos, or a logit bias)",
            at));
      }
      return make_error(fmt::format(
          "[grammar] no token is allowed {}: no token of the vocabulary continues the grammar "
          "(or every token that does has a -inf logit)",
          at));
    }
    return Ok{};
  }
  int allows(tokenizer::TokenId token) override {
    // A grammar past one of its limits, or dead, is left to apply() and its error.
    if (matcher_.table().error() || matcher_.state().dead()) return -1;
    const bool ok = masker_.allows(matcher_, token);
    if (matcher_.table().error()) return -1;
    return ok ? 1 : 0;
  }
  bool mask_ready() override { return masker_.has_cached(matcher_); }
  void accept(tokenizer::TokenId token) override {
    // The token came from the mask, so it is allowed; a refusal would leave the state.
    if (masker_.accept_token(matcher_, token)) output_ += masker_.vocab().bytes(token);
  }
  void reset() override {
    matcher_.reset();
    output_.clear();
  }

 private:
  grammar::Matcher matcher_;
  grammar::TokenMasker masker_;
  std::string output_;  // the accepted bytes (for the error message)
};

}  // namespace

Result<std::unique_ptr<engine::TokenConstraint>> make_grammar_constraint(
    const std::string& gbnf, std::shared_ptr<const grammar::TokenVocab> vocab) {
  MINFER_TRY(std::shared_ptr<const grammar::Grammar> g, grammar::Grammar::parse(gbnf));
  MINFER_TRY(std::shared_ptr<grammar::StateTable> table, grammar::StateTable::create(g));
  return make_grammar_constraint(std::move(table), std::move(vocab));
}

std::unique_ptr<engine::TokenConstraint> make_grammar_constraint(
    std::shared_ptr<grammar::StateTable> table, std::shared_ptr<const grammar::TokenVocab> vocab) {
  return std::unique_ptr<engine::TokenConstraint>(
      new GrammarConstraint(std::move(table), std::move(vocab)));
}

}  // namespace minfer::server
