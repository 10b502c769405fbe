// Stage 15 tests (the text path): StopMatcher holds back a possible stop-string start
// and never returns a byte of a stop string; Utf8Emitter writes only valid UTF-8, with
// U+FFFD for every maximal invalid subpart. Bars: exact bytes.
#include "engine/text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace minfer::engine {
namespace {

// Feeds `pieces` through a matcher and returns everything it let out, and whether it
// stopped (flushing held bytes at the end when it did not).
std::pair<std::string, bool> run(std::vector<std::string> stops, std::vector<std::string> pieces,
                                 std::vector<std::string>* per_feed = nullptr) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const std::string& p : pieces) {
    const StopMatcher::Feed f = m.feed(p);
    out.append(f.text);
    if (per_feed != nullptr) per_feed->emplace_back(f.text);
    if (f.stopped) return {out, true};
  }
  out.append(m.flush());
  return {out, false};
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  EXPECT_EQ(run({}, {"a", "bc"}), std::make_pair(std::string("abc"), false));
}

TEST(StopMatcher, HoldsBackAPossibleStartUntilDecided) {
  std::vector<std::string> per_feed;
  // "Us" may begin "User:"; it is held, then released when "x" rules it out.
  auto r = run({"User:"}, {"Hello ", "Us", "x"}, &per_feed);
  EXPECT_EQ(r, std::make_pair(std::string("Hello Usx"), false));
  ASSERT_EQ(per_feed.size(), 3u);
  EXPECT_EQ(per_feed[0], "Hello ");
  EXPECT_EQ(per_feed[1], "");
  EXPECT_EQ(per_feed[2], "Usx");
}

TEST(StopMatcher, NoByteOfAStopSplitAcrossTokensIsEverReturned) {
  std::vector<std::string> per_feed;
  auto r = run({"User:"}, {"Hi\nU", "se", "r", ": more"}, &per_feed);
  EXPECT_EQ(r, std::make_pair(std::string("Hi\n"), true));
  for (const std::string& f : per_feed) EXPECT_EQ(f.find('U'), std::string::npos) << f;
}

TEST(StopMatcher, StopInsideOneTokenCutsBeforeIt) {
  EXPECT_EQ(run({"\n\n"}, {"abc\n\nUser"}), std::make_pair(std::string("abc"), true));
}

TEST(StopMatcher, EarliestCompletedMatchWins) {
  EXPECT_EQ(run({"bc", "abc"}, {"xab", "c"}), std::make_pair(std::string("x"), true));
}

TEST(StopMatcher, MatchedNamesTheStopThatEndedTheText) {
  StopMatcher m({"bc", "abc", "zz"});
  EXPECT_EQ(m.matched(), "");
  EXPECT_FALSE(m.feed("xab").stopped);
  EXPECT_EQ(m.matched(), "");
  EXPECT_TRUE(m.feed("c").stopped);
  EXPECT_EQ(m.matched(), "abc");  // it starts first, so it ended the text
  m.reset();
  EXPECT_EQ(m.matched(), "");
  EXPECT_TRUE(m.feed("q zz").stopped);
  EXPECT_EQ(m.matched(), "zz");
}

TEST(StopMatcher, HeldBytesAreTextWhenTheStreamEnds) {
  EXPECT_EQ(run({"</s>"}, {"end </"}), std::make_pair(std::string("end </"), false));
}

TEST(StopMatcher, EmptyStopNeverMatchesAndResetStartsOver) {
  EXPECT_EQ(run({""}, {"abc"}), std::make_pair(std::string("abc"), false));
  StopMatcher m({"xy"});
  EXPECT_TRUE(m.feed("axy").stopped);
  EXPECT_TRUE(m.feed("more").stopped);
  m.reset();
  EXPECT_EQ(std::string(m.feed("ab").text), "ab");
}

std::string emit(std::vector<std::string> pieces) {
  std::string out;
  Utf8Emitter e([&out](std::string_view s) { out.append(s); });
  for (const std::string& p : pieces) e.feed(p);
  e.flush();
  return out;
}

constexpr const char* kFffd = "\xEF\xBF\xBD";

TEST(Utf8Emitter, ValidTextAndSplitCharactersPassUnchanged) {
  EXPECT_EQ(emit({"h\xC3", "\xA9llo \xE2\x82", "\xAC \xF0\x9F\x98", "\x80"}),
            "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80");
}

TEST(Utf8Emitter, InvalidBytesBecomeReplacementCharacters) {
  const std::string r = kFffd;
  EXPECT_EQ(emit({"a\xFF"
                  "b"}),
            "a" + r + "b");              // never valid
  EXPECT_EQ(emit({"\x80"}), r);          // stray continuation
  EXPECT_EQ(emit({"\xC0\xAF"}), r + r);  // overlong lead
  EXPECT_EQ(emit({"\xE2\x82"
                  "x"}),
            r + "x");                                    // lead cut short: one subpart
  EXPECT_EQ(emit({"\xED\xA0\x80"}), r + r + r);          // surrogate
  EXPECT_EQ(emit({"\xF4\x90\x80\x80"}), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(emit({"ok\xE2\x82"}), "ok" + r);             // unfinished at the end
}

TEST(Utf8Emitter, SinkNeverSeesInvalidUtf8) {
  std::vector<std::string> calls;
  Utf8Emitter e([&calls](std::string_view s) { calls.emplace_back(s); });
  e.feed("\xE2");
  e.feed("\x82");
  EXPECT_TRUE(calls.empty());  // still a valid start: held
  e.feed("\xAC\xFF");
  e.flush();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::string("\xE2\x82\xAC") + kFffd);
}

}  // namespace
}  // namespace minfer::engine
