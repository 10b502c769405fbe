// Stage 4 (text → ids): byte-level BPE (tokenizer.ggml.model = gpt2) — pre-tokenized
// words, GPT-2 byte mapping, merges applied lowest rank first.
// Invariants: merges follow llama.cpp's llm_tokenizer_bpe_session exactly: among the
// live adjacent pairs the lowest rank merges first, ties go to the leftmost pair, and
// a queued pair is dropped once either side changed; a final symbol that is not a
// token falls back to one-byte tokens, and bytes without a token are dropped (as
// llama.cpp does; byte-level vocabularies have all 256).
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_tokenizer.h"

namespace minfer::tokenizer {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the word
  size_t n;       // bytes; 0 once merged into the left neighbour
};

struct Bigram {
  int left;
  int right;
  int rank;
  std::string text;
};

struct BigramAfter {  // priority_queue puts the "largest" on top: invert
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

int VocabTokenizer::bpe_rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left).push_back(' ');
  key.append(right);
  const auto it = bpe_ranks_.find(key);
  return it == bpe_ranks_.end() ? -1 : it->second;
}

void VocabTokenizer::bpe_encode_word(const std::string& word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const TokenId whole = find_token(word);
    if (whole != kNoToken) {
      out.push_back(whole);
      return;
    }
  }

  std::vector<Symbol> symbols;
  for (size_t off = 0; off < word.size();) {
    const size_t n =
        std::min(word.size() - off, utf8::lead_length(static_cast<uint8_t>(word[off])));
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{.prev = index - 1, .next = index + 1, .offset = off, .n = n});
    off += n;
  }
  symbols.back().next = -1;

  auto text_of = [&](int i) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    return std::string_view(word).substr(s.offset, s.n);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, BigramAfter> queue;
  auto add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view l = text_of(left), r = text_of(right);
    const int rank = bpe_rank(l, r);
    if (rank < 0) return;
    std::string text;
    text.reserve(l.size() + r.size());
    text.append(l).append(r);
    queue.push(Bigram{.left = left, .right = right, .rank = rank, .text = std::move(text)});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(b.left)];
    Symbol& right = symbols[static_cast<size_t>(b.right)];
    if (left.n == 0 || right.n == 0) continue;
    // Stale: one side grew since this pair was queued. Symbols are contiguous slices
    // of the word, so comparing the joined slice with the queued text suffices.
    if (left.n + right.n != b.text.size() ||
        std::string_view(word).substr(left.offset, left.n + right.n) != b.text ||
        left.next != b.right) {
      continue;
    }
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = b.left;
    add_bigram(left.prev, b.left);
    add_bigram(b.left, left.next);
  }

  for (size_t i = 0; i < symbols.size(); ++i) {
    const Symbol& s = symbols[i];
    if (s.n == 0) continue;
    const std::string_view piece = std::string_view(word).substr(s.offset, s.n);
    const TokenId id = find_token(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (const char c : piece) {
      const TokenId byte_id = find_token(std::string_view(&c, 1));
      if (byte_id != kNoToken) out.push_back(byte_id);
    }
  }
}

Status VocabTokenizer::bpe_encode(std::string_view text, std::vector<TokenId>& out) const {
  MINFER_TRY(const std::vector<std::string> words, pre_tokenizer_->split(text));
  std::string encoded;
  for (const std::string& w : words) {
    encoded.clear();
    unicode::append_byte_encoded(encoded, w);
    bpe_encode_word(encoded, out);
  }
  return Ok{};
}

}  // namespace minfer::tokenizer
