// Stage 17 (HTTP): grammar constraint (src/grammar's matcher and token masks).
#include "server/constraint.h"

#include <limits>

namespace minfer::server {
namespace {

class GrammarConstraint final : public engine::TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<grammar::StateTable> table,
                    std::shared_ptr<const grammar::TokenVocab> vocab)
      : matcher_(table), masker_(table, std::move(vocab)) {}

  Status apply(std::span<float> logits) override {
    MINFER_TRY(const grammar::TokenMask* mask, masker_.mask(matcher_));
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const auto n = static_cast<tokenizer::TokenId>(logits.size());
    const auto n_mask = static_cast<tokenizer::TokenId>(mask->bits.size() * 64);
    for (tokenizer::TokenId id = 0; id < n; ++id) {
      if (id >= n_mask || !mask->test(id)) logits[static_cast<size_t>(id)] = kNegInf;
    }
    return Ok{};
  }
  void accept(tokenizer::TokenId token) override {
    // The token came from the mask, so it is allowed; a refusal would leave the state.
    masker_.accept_token(matcher_, token);
  }
  void reset() override { matcher_.reset(); }

 private:
  grammar::Matcher matcher_;
  grammar::TokenMasker masker_;
};

}  // namespace

Result<std::unique_ptr<engine::TokenConstraint>> make_grammar_constraint(
    const std::string& gbnf, std::shared_ptr<const grammar::TokenVocab> vocab) {
  MINFER_TRY(std::shared_ptr<const grammar::Grammar> g, grammar::Grammar::parse(gbnf));
  MINFER_TRY(std::shared_ptr<grammar::StateTable> table, grammar::StateTable::create(g));
  return std::unique_ptr<engine::TokenConstraint>(
      new GrammarConstraint(std::move(table), std::move(vocab)));
}

}  // namespace minfer::server
