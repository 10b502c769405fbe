// Stage 4 (text → ids): regex word splitting for byte-level BPE, on PCRE2.
// Invariants: pieces are contiguous and cover the text; each regex only ever sees one
// piece produced by the previous regex (lookaheads stop at the piece's end).
//
// How llama.cpp splits (src/unicode.cpp, unicode_regex_split) and why PCRE2 agrees:
//  * The text is decoded leniently (an invalid byte → U+FFFD) and split on code-point
//    offsets; each regex runs inside every piece left by the one before, and the text
//    between two matches becomes a piece of its own. We do the same, piece by piece,
//    passing only the piece to pcre2_match.
//  * The GPT-2 and Llama-3 regexes run as hand-written state machines there
//    (unicode_regex_split_custom_gpt2/_llama3); their results are the regexes' own
//    leftmost-first matches, which PCRE2 reproduces (alternation order, greedy
//    backtracking of \s+(?!\S), \p{N}{1,3} chunks, case-folded contractions written
//    as '[sS]' etc.).
//  * Every other regex runs on std::regex. If it mentions \p{..} it runs on a
//    "collapsed" text where each non-ASCII code point becomes one byte standing for
//    its category (L, N, P, M, S, or "other"), and \p{X} becomes [<that byte> +
//    ASCII members of X]; without \p{..} it runs on std::wregex. Category membership
//    is therefore the Unicode general category, which PCRE2's \p{..} under UCP gives
//    directly. (The collapse also maps \p{Lu}/\p{Ll}/.. to all letters; pre-tokenizers
//    whose regexes need those sub-categories are not offered, see pre_table.cpp.)
//  * Whitespace is the one place the engines differ. llama.cpp replaces every
//    non-ASCII White_Space code point by U+000B before matching (both the collapsed
//    and the wregex paths, and its custom splitters test the same set), and the C
//    locale's \s then matches exactly [\t\n\v\f\r ]. PCRE2's \s under UCP would
//    instead use its own Unicode table (it misses U+0085, and it would match inside
//    explicit ranges such as [\x{800}-\x{4E00}] that llama.cpp never lets whitespace
//    reach). So we build the same substituted subject, and translate \s, \S and \d
//    to their ASCII classes before compiling.
//  * std::regex's `$` matches only at the end of the piece: PCRE2_DOLLAR_ENDONLY.
//  * Surrogates and values above U+10FFFF (which the lenient decoder can produce) are
//    not valid in a PCRE2 UTF subject; they stand in as U+E000 (private use), which
//    has the same category role ("other") in every regex. Words are rebuilt from the
//    original code points, so the stand-in never reaches the output.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace minfer::tokenizer {

namespace {

constexpr uint32_t kSubjectStandIn = 0xE000;
// The C locale's \s, which is what std::regex matches (U+000B included, which is where
// llama.cpp sends every non-ASCII whitespace code point).
constexpr const char* kAsciiSpaceBody = "\\t-\\r ";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Per-thread match state: encode() is const and may run on several threads at once.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);  // only the whole match is read
    context = pcre2_match_context_create(nullptr);
    // Long runs of whitespace backtrack through \s+(?!\S); the default 32 KiB JIT
    // stack is too small for pathological inputs, 8 MiB covers megabyte-long runs.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

struct PreTokenizer::Compiled {
  std::string source;  // llama.cpp's form, for messages
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::string PreTokenizer::translate(std::string_view re) {
  std::string out;
  out.reserve(re.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char n = re[++i];
      if (n == 's') {
        if (!in_class) out += '[';
        out += kAsciiSpaceBody;
        if (!in_class) out += ']';
      } else if (n == 'S' && !in_class) {
        out += "[^";
        out += kAsciiSpaceBody;
        out += ']';
      } else if (n == 'd') {  // std::regex \d is ASCII; PCRE2's under UCP is \p{Nd}
        out += in_class ? "0-9" : "[0-9]";
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A leading '^' negates and a ']' right after the opening is a literal.
      if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
      if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Result<PreTokenizer> PreTokenizer::create(const std::vector<std::string>& regexes) {
  PreTokenizer pre;
  for (const auto& source : regexes) {
    const std::string pattern = translate(source);
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_offset, nullptr);
    if (code == nullptr) {
      return make_error("pre-tokenizer regex '" + source + "' does not compile at offset " +
                        std::to_string(err_offset) + ": " + pcre2_message(err));
    }
    // JIT is an accelerator only: where the platform lacks it pcre2_match interprets.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto compiled = std::make_shared<Compiled>();
    compiled->source = source;
    compiled->code = code;
    pre.regexes_.push_back(std::move(compiled));
  }
  return pre;
}

Result<std::vector<std::string>> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cps = unicode::decode_utf8(text);
  const size_t n_cps = cps.size();

  // The subject PCRE2 sees (see the file comment), with the byte offset of every
  // code point and, back, the code-point index of every boundary byte.
  std::string subject;
  subject.reserve(text.size());
  std::vector<size_t> cp_byte(n_cps + 1);
  for (size_t i = 0; i < n_cps; ++i) {
    cp_byte[i] = subject.size();
    uint32_t cp = cps[i];
    if (cp >= 0x80 && unicode::is_whitespace(cp)) {
      cp = 0x0B;
    } else if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      cp = kSubjectStandIn;
    }
    utf8::append(subject, cp);
  }
  cp_byte[n_cps] = subject.size();
  std::vector<uint32_t> byte_cp(subject.size() + 1, 0);
  for (size_t i = 0; i <= n_cps; ++i) byte_cp[cp_byte[i]] = static_cast<uint32_t>(i);

  // Piece lengths in code points; one piece to start.
  std::vector<size_t> pieces;
  if (n_cps > 0) pieces.push_back(n_cps);

  MatchScratch& ms = scratch();
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  for (const auto& re : regexes_) {
    std::vector<size_t> next;
    next.reserve(pieces.size() * 2);
    size_t cp_start = 0;
    for (const size_t len : pieces) {
      const size_t b0 = cp_byte[cp_start];
      const size_t b_len = cp_byte[cp_start + len] - b0;
      size_t pos = 0;      // search start, bytes from b0
      size_t emitted = 0;  // bytes from b0 already in `next`
      while (pos <= b_len) {
        const int rc =
            pcre2_match(re->code, subj + b0, b_len, pos, PCRE2_NO_UTF_CHECK, ms.data, ms.context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          return make_error("pre-tokenizer regex '" + re->source +
                            "' failed: " + pcre2_message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ms.data);
        const size_t m0 = ov[0], m1 = ov[1];
        auto cp_at = [&](size_t b) { return static_cast<size_t>(byte_cp[b0 + b]); };
        if (m0 > emitted) next.push_back(cp_at(m0) - cp_at(emitted));
        if (m1 > m0) next.push_back(cp_at(m1) - cp_at(m0));
        emitted = m1;
        if (m1 > m0) {
          pos = m1;
        } else {  // an empty match: step over one code point, as regex iterators do
          if (m1 >= b_len) break;
          pos = cp_byte[cp_at(m1) + 1] - b0;
        }
      }
      if (emitted < b_len) {
        next.push_back(cp_start + len - static_cast<size_t>(byte_cp[b0 + emitted]));
      }
      cp_start += len;
    }
    pieces = std::move(next);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t start = 0;
  for (const size_t len : pieces) {
    std::string w;
    for (size_t i = start; i < start + len; ++i) utf8::append(w, cps[i]);
    words.push_back(std::move(w));
    start += len;
  }
  return words;
}

}  // namespace minfer::tokenizer
