// Stage 16 tests (sessions): --session files — resume with zero prefill and continue
// exactly as a conversation that never stopped (tokens and logits, bitwise); refusal
// of corrupt files, other models and contexts too small.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "chat/session_file.h"
#include "chat_fixture.h"

namespace minfer::chat {
namespace {

using testing::chat_engine;
using testing::make_conversation;
using testing::same_bits;
using testing::turn;

const ChatMlRenderer kChatMl;

struct TempPath {
  std::string path;
  explicit TempPath(const std::string& stem)
      : path(::testing::TempDir() + stem + "-" + std::to_string(::getpid()) + ".session") {}
  ~TempPath() { std::remove(path.c_str()); }
};

ConversationOptions sampled(std::vector<float>* first_logits, bool* want) {
  ConversationOptions o;
  o.n_predict = 6;
  o.sampler.seed = 99;
  o.sampler.temp = 0.7f;
  o.system = "You answer in riddles.";
  o.on_logits = [first_logits, want](std::span<const float> l) {
    if (*want) first_logits->assign(l.begin(), l.end());
    *want = false;
  };
  return o;
}

// A conversation of one turn on `e`, saved to `path`; returns its cursor (the tests that
// only need a saved file).
size_t save_one_turn(testing::TinyEngine& e, const std::string& path) {
  std::vector<float> l;
  bool w = false;
  auto c = make_conversation(*e, kChatMl, sampled(&l, &w));
  EXPECT_TRUE(c);
  if (!c) return 0;
  turn(*c, "hello");
  EXPECT_TRUE(c->save(path).ok());
  return c->cursor();
}

TEST(Session, ResumeRunsZeroForwardsAndContinuesLikeAnUninterruptedSessionBitwise) {
  TempPath file("resume");
  auto a = chat_engine(512, "sess-a");
  auto b = chat_engine(512, "sess-b");
  ASSERT_TRUE(a.engine && b.engine);
  std::vector<float> la, lb;
  bool wa = false, wb = false;
  auto ca = make_conversation(*a, kChatMl, sampled(&la, &wa));
  turn(*ca, "first");
  turn(*ca, "second message");
  ASSERT_TRUE(ca->save(file.path).ok());

  auto cb = make_conversation(*b, kChatMl, sampled(&lb, &wb));
  const uint64_t executes = b->stats().executes;
  auto info = cb->load(file.path);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(b->stats().executes, executes) << "resuming ran a forward";
  EXPECT_EQ(info->n_kv_tokens, ca->cursor());
  EXPECT_EQ(info->n_messages, ca->messages().size());
  EXPECT_EQ(cb->stream(), ca->stream());
  EXPECT_EQ(cb->messages(), ca->messages());
  EXPECT_EQ(cb->n_turns(), 2);

  // Both continue: same delta, same logits bit for bit, same sampled reply.
  wa = wb = true;
  const TurnStats sa = turn(*ca, "third");
  const TurnStats sb = turn(*cb, "third");
  EXPECT_EQ(sb.n_prefilled, sa.n_prefilled);
  EXPECT_EQ(sb.n_reused, sa.n_reused);
  EXPECT_TRUE(same_bits(la, lb));
  EXPECT_EQ(sb.reply, sa.reply);
  EXPECT_EQ(cb->stream(), ca->stream());
  // /regen right after a resume rewinds into restored rows.
  auto ra = ca->regen([](std::string_view) {});
  auto rb = cb->regen([](std::string_view) {});
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(rb->reply, ra->reply);
}

TEST(Session, ClearAfterAResumeWithoutSystemFlagKeepsTheSessionsSystemPrompt) {
  TempPath file("clear"), again("clear-again");
  auto a = chat_engine(512, "sess-clear-a");
  auto b = chat_engine(512, "sess-clear-b");
  ASSERT_TRUE(a.engine && b.engine);
  std::vector<float> l;
  bool w = false;
  auto ca = make_conversation(*a, kChatMl, sampled(&l, &w));
  turn(*ca, "first");
  ASSERT_TRUE(ca->save(file.path).ok());

  // Resumed as `-cnv --session S` without --system: the system prompt is the file's.
  ConversationOptions o = sampled(&l, &w);
  o.system.clear();
  auto cb = make_conversation(*b, kChatMl, o);
  ASSERT_TRUE(cb->load(file.path).ok());
  cb->clear();
  ASSERT_EQ(cb->messages().size(), 1u);
  EXPECT_EQ(cb->messages()[0].role, "system");
  EXPECT_EQ(cb->messages()[0].content, "You answer in riddles.");
  EXPECT_EQ(cb->cursor(), 0u);
  // ... and a save after /clear keeps it too.
  ASSERT_TRUE(cb->save(again.path).ok());
  auto cc = make_conversation(*b, kChatMl, o);
  ASSERT_TRUE(cc->load(again.path).ok());
  ASSERT_EQ(cc->messages().size(), 1u);
  EXPECT_EQ(cc->messages()[0].content, "You answer in riddles.");
}

TEST(Session, ResumeIntoALargerContextWorksAndIntoATooSmallOneIsRefused) {
  TempPath file("ctx");
  auto a = chat_engine(256, "sess-ctx-a");
  ASSERT_TRUE(a.engine);
  const size_t cursor = save_one_turn(a, file.path);
  std::vector<float> l;
  bool w = false;
  {
    auto big = chat_engine(1024, "sess-ctx-big");
    auto c = make_conversation(*big, kChatMl, sampled(&l, &w));
    auto info = c->load(file.path);
    ASSERT_TRUE(info.ok()) << info.error().message;
    EXPECT_EQ(info->n_kv_tokens, cursor);
  }
  auto small = chat_engine(16, "sess-ctx-small");
  auto c = make_conversation(*small, kChatMl, sampled(&l, &w));
  auto info = c->load(file.path);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.error().message.find("more than n_ctx 16"), std::string::npos)
      << info.error().message;
  EXPECT_EQ(c->cursor(), 0u);
}

TEST(Session, CorruptFileFailsItsChecksumAndNothingChanges) {
  TempPath file("corrupt");
  auto a = chat_engine(256, "sess-corrupt");
  ASSERT_TRUE(a.engine);
  save_one_turn(a, file.path);
  std::vector<float> l;
  bool w = false;
  {
    std::fstream f(file.path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(200);
    const char x = 0x5a;
    f.write(&x, 1);
  }
  auto c = make_conversation(*a, kChatMl, sampled(&l, &w));
  auto info = c->load(file.path);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.error().message.find("checksum"), std::string::npos) << info.error().message;
  EXPECT_EQ(c->cursor(), 0u);

  std::ofstream(file.path, std::ios::binary) << "not a session";
  info = c->load(file.path);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.error().message.find("not a minfer session file"), std::string::npos);
}

TEST(Session, ChecksumIsXxh3OfEveryByteBeforeItAndVersion1FilesAreRefused) {
  TempPath file("xxh3");
  auto a = chat_engine(256, "sess-xxh3");
  ASSERT_TRUE(a.engine);
  save_one_turn(a, file.path);
  std::vector<float> l;
  bool w = false;
  std::string bytes;
  {
    std::ifstream f(file.path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(bytes.size(), 48u);
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  EXPECT_EQ(stored, XXH3_64bits(bytes.data(), bytes.size() - 8));
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, kSessionVersion);
  // A file of the FNV-1a era (version 1) is refused by its version, before its checksum.
  {
    std::fstream f(file.path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(8);
    const uint32_t v1 = 1;
    f.write(reinterpret_cast<const char*>(&v1), 4);
  }
  auto c = make_conversation(*a, kChatMl, sampled(&l, &w));
  auto info = c->load(file.path);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.error().message.find("has version 1, this build reads 2"), std::string::npos)
      << info.error().message;
  EXPECT_EQ(c->cursor(), 0u);
}

// The header's kv_types word records the K and V cache formats and whether the rows are
// rotated; 0 (files from before it) reads as "not recorded"; a code this build does not
// know is refused; a restore into other types or the other basis is refused naming both.
TEST(Session, KvCacheTypesAreRecordedAndCheckedAndUnknownCodesRefused) {
  TempPath file("kvtypes");
  SessionData d;
  d.model_hash = 7;
  d.state = {{"x", 1}};
  d.n_kv_tokens = 2;
  d.kv_token_bytes = 4;
  d.kv.assign(8, std::byte{1});
  d.kv_format = graph::KvFormats(graph::KvFormat::kQ8_0, graph::KvFormat::kF16);
  ASSERT_TRUE(write_session(file.path, d).ok());
  auto back = read_session(file.path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_TRUE(back->kv_format.has_value());
  EXPECT_EQ(*back->kv_format, *d.kv_format);
  EXPECT_FALSE(back->kv_rotated);
  EXPECT_TRUE(check_kv_format("f", *back, *d.kv_format, false).ok());
  Status other = check_kv_format(
      "'f'", *back, graph::KvFormats(graph::KvFormat::kF16, graph::KvFormat::kQ8_0), false);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().message,
            "'f' holds a q8_0/f16 KV cache (K q8_0, V f16), this run's is f16/q8_0 (K f16, V "
            "q8_0): pass the same -ctk / -ctv");

  // Rows stored rotated (llama.cpp's Walsh-Hadamard rotation, bit 16) restore only into a
  // run that rotates too, and the reverse.
  d.kv_rotated = true;
  ASSERT_TRUE(write_session(file.path, d).ok());
  back = read_session(file.path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back->kv_rotated);
  EXPECT_TRUE(check_kv_format("f", *back, *d.kv_format, true).ok());
  Status basis = check_kv_format("'f'", *back, *d.kv_format, false);
  ASSERT_FALSE(basis.ok());
  EXPECT_EQ(basis.error().message,
            "'f' holds q8_0/f16 KV rows rotated by llama.cpp's Walsh-Hadamard rotation, this "
            "run's are not: run with the same MINFER_KV_ROTATION (unset or 0)");
  d.kv_rotated = false;
  ASSERT_TRUE(write_session(file.path, d).ok());
  back = read_session(file.path);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(check_kv_format("f", *back, *d.kv_format, true).ok());

  d.kv_format.reset();  // an older writer: not recorded, nothing to check
  ASSERT_TRUE(write_session(file.path, d).ok());
  back = read_session(file.path);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->kv_format.has_value());
  EXPECT_TRUE(check_kv_format("f", *back, graph::KvFormat::kF16, false).ok());
  EXPECT_TRUE(check_kv_format("f", *back, graph::KvFormat::kQ8_0, true).ok());

  // An unknown code, resealed with a valid checksum, is refused by name.
  std::string bytes;
  {
    std::ifstream f(file.path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  const uint32_t bad = 0x0909;
  std::memcpy(bytes.data() + 12, &bad, 4);
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size() - 8);
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  {
    std::ofstream f(file.path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  back = read_session(file.path);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("names KV cache types 0x909 this build does not know"),
            std::string::npos)
      << back.error().message;
}

TEST(Session, ModelHashCoversMetadataTensorTableAndWeightSamples) {
  auto a = chat_engine(64, "hash-a");
  minfer::testing::TinySpec more = testing::chat_spec();
  more.n_layer = 3;
  auto b = engine::testing::make_engine(more, 1, 64, "hash-b");
  minfer::testing::TinySpec renamed = testing::chat_spec();
  renamed.extra_kv = {{"general.name", gguf::Value::string("another")}};
  auto c = engine::testing::make_engine(renamed, 1, 64, "hash-c");
  minfer::testing::TinySpec reseeded = testing::chat_spec();
  reseeded.seed = 4;  // same metadata and tensor table, other weights
  auto d = engine::testing::make_engine(reseeded, 1, 64, "hash-d");
  ASSERT_TRUE(a.engine && b.engine && c.engine && d.engine);
  const uint64_t ha = model_hash(a->file());
  EXPECT_EQ(ha, model_hash(a->file()));
  EXPECT_NE(ha, model_hash(b->file()));
  EXPECT_NE(ha, model_hash(c->file()));
  EXPECT_NE(ha, model_hash(d->file()));
}

TEST(Session, AFileSavedForAnotherModelIsRefused) {
  TempPath file("model");
  auto a = chat_engine(256, "sess-refuse-a");
  minfer::testing::TinySpec more = testing::chat_spec();
  more.n_layer = 3;
  auto b = engine::testing::make_engine(more, 1, 256, "sess-refuse-b");
  ASSERT_TRUE(a.engine && b.engine);
  save_one_turn(a, file.path);
  std::vector<float> l;
  bool w = false;
  auto cb = make_conversation(*b, kChatMl, sampled(&l, &w));
  auto info = cb->load(file.path);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.error().message.find("another model"), std::string::npos) << info.error().message;
}

}  // namespace
}  // namespace minfer::chat
