// Stage 17 tests: KV events without a server. Bars: the block hash equals Python's
// xxhash.xxh3_64_intdigest of the documented bytes (golden values from an independent
// implementation); vLLM's batch encodes to the bytes msgpack.packb gives for the same
// Python value (golden); the block index announces a hash once while any slot holds it
// (shared prefixes are reference counted), removes only what the last holder drops,
// and is silent when a block moves between slots in one update; the publisher's queue
// drops its oldest batch when full, never waiting.
#include "server/kv_events.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace minfer::server {
namespace {

using engine::TokenId;
using Span = std::span<const TokenId>;

std::string hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out.push_back(kDigits[(static_cast<uint8_t>(c) >> 4) & 0xf]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 0xf]);
  }
  return out;
}

TEST(KvEvents, BlockHashMatchesPythonXxh3Golden) {
  // xxhash.xxh3_64_intdigest(struct.pack('<Q', 0) + struct.pack('<4i', 1, 2, 3, 4),
  //                          0x6d696e666572)
  const std::array<TokenId, 4> first{1, 2, 3, 4};
  const uint64_t h0 = kv_block_hash(0, first);
  EXPECT_EQ(h0, 0x8071ed7c4e1b0817ULL);
  // ... chained: struct.pack('<Q', h0) + struct.pack('<4i', 5, 6, 7, -1)
  const std::array<TokenId, 4> second{5, 6, 7, -1};
  EXPECT_EQ(kv_block_hash(h0, second), 0x2b6cbfeebdb77307ULL);
}

TEST(KvEvents, BatchEncodesAsMsgpackPackbGolden) {
  // msgpack.packb([1.5, [{"type": "BlockStored", "block_hashes": [7, 300],
  //   "parent_block_hash": None, "token_ids": [1..8], "block_size": 4, "lora_id": None,
  //   "medium": None, "lora_name": None},
  //   {"type": "BlockRemoved", "block_hashes": [2**64 - 1], "medium": None},
  //   {"type": "AllBlocksCleared"}], 0])
  const std::vector<KvEvent> events{
      {.kind = KvEvent::Kind::kStored,
       .hashes = {7, 300},
       .parent = std::nullopt,
       .tokens = {1, 2, 3, 4, 5, 6, 7, 8}},
      {.kind = KvEvent::Kind::kRemoved, .hashes = {~uint64_t{0}}},
      {.kind = KvEvent::Kind::kAllCleared},
  };
  EXPECT_EQ(hex(encode_kv_batch(1.5, events, 4)),
            "93cb3ff80000000000009388a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368"
            "65739207cd012cb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f69647398010203"
            "0405060708aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756dc0a96c6f72615f"
            "6e616d65c083a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cfff"
            "ffffffffffffffa66d656469756dc081a474797065b0416c6c426c6f636b73436c65617265640"
            "0");
}

TEST(KvEvents, SharedPrefixIsStoredOnceAndRemovedWithItsLastHolder) {
  KvBlockIndex index(4, 2);
  const std::vector<TokenId> a{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};           // 2 full blocks + 2 tokens
  const std::vector<TokenId> b{1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23};  // same 2, another
  const uint64_t h0 = kv_block_hash(0, Span(a).first(4));
  const uint64_t h1 = kv_block_hash(h0, Span(a).subspan(4, 4));
  const uint64_t hb = kv_block_hash(h1, Span(b).subspan(8, 4));
  std::vector<KvEvent> ev;

  std::array<Span, 2> cached{Span(a), Span()};
  index.update(cached, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(ev[0].hashes, (std::vector<uint64_t>{h0, h1}));
  EXPECT_FALSE(ev[0].parent.has_value());
  EXPECT_EQ(ev[0].tokens, (std::vector<TokenId>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(index.n_blocks(), 2u);

  // The second slot shares the first two blocks: only its third is new, under h1.
  ev.clear();
  cached = {Span(a), Span(b)};
  index.update(cached, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].hashes, (std::vector<uint64_t>{hb}));
  EXPECT_EQ(ev[0].parent, h1);
  EXPECT_EQ(ev[0].tokens, (std::vector<TokenId>{20, 21, 22, 23}));
  EXPECT_EQ(index.n_blocks(), 3u);

  // The first slot drops its cache: the second still holds h0 and h1.
  ev.clear();
  cached = {Span(), Span(b)};
  index.update(cached, ev);
  EXPECT_TRUE(ev.empty());
  EXPECT_EQ(index.n_blocks(), 3u);

  // The second truncates to 6 tokens: block 1 (partial now) and 2 go, deepest first.
  ev.clear();
  cached = {Span(), Span(b).first(6)};
  index.update(cached, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(ev[0].hashes, (std::vector<uint64_t>{hb, h1}));
  EXPECT_EQ(index.n_blocks(), 1u);
}

TEST(KvEvents, BlockMovingBetweenSlotsInOneUpdateIsSilent) {
  KvBlockIndex index(2, 2);
  const std::vector<TokenId> a{1, 2, 3, 4};
  std::vector<KvEvent> ev;
  std::array<Span, 2> cached{Span(a), Span()};
  index.update(cached, ev);
  ASSERT_EQ(ev.size(), 1u);
  ev.clear();
  cached = {Span(), Span(a)};
  index.update(cached, ev);
  EXPECT_TRUE(ev.empty());
  EXPECT_EQ(index.n_blocks(), 2u);
}

TEST(KvEvents, ChangedTokenReplacesItsBlockAndEveryLaterOne) {
  KvBlockIndex index(2, 1);
  const std::vector<TokenId> a{1, 2, 3, 4, 5, 6};
  const std::vector<TokenId> b{1, 2, 3, 9, 5, 6};  // block 1 differs; block 2 chains from it
  std::vector<KvEvent> ev;
  std::array<Span, 1> cached{Span(a)};
  index.update(cached, ev);
  const std::vector<uint64_t> old = ev.at(0).hashes;
  ASSERT_EQ(old.size(), 3u);
  ev.clear();
  cached = {Span(b)};
  index.update(cached, ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(ev[0].parent, old[0]);
  EXPECT_EQ(ev[0].hashes.size(), 2u);
  EXPECT_EQ(ev[0].tokens, (std::vector<TokenId>{3, 9, 5, 6}));
  EXPECT_EQ(ev[1].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(ev[1].hashes, (std::vector<uint64_t>{old[2], old[1]}));
  EXPECT_EQ(index.n_blocks(), 3u);

  ev.clear();
  index.clear(ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kAllCleared);
  EXPECT_EQ(index.n_blocks(), 0u);
}

TEST(KvEvents, FullQueueDropsTheOldestAndSaysSo) {
  DropOldestQueue<int> q(2);
  EXPECT_FALSE(q.push(1));
  EXPECT_FALSE(q.push(2));
  EXPECT_TRUE(q.push(3));  // 1 goes
  EXPECT_TRUE(q.push(4));  // 2 goes
  std::deque<int> out;
  EXPECT_TRUE(q.take(out, std::chrono::milliseconds(0)));
  EXPECT_EQ(out, (std::deque<int>{3, 4}));
  out.clear();
  EXPECT_FALSE(q.push(5));  // room again
  q.close();
  EXPECT_FALSE(q.take(out, std::chrono::milliseconds(-1)));  // closed: the rest, at once
  EXPECT_EQ(out, (std::deque<int>{5}));
}

TEST(KvEvents, EndpointZmqRefusesIsAnErrorNamingIt) {
  std::atomic<uint64_t> dropped{0};
  auto p = KvEventPublisher::open({.endpoint = "nonsense://x"}, dropped);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("--kv-events 'nonsense://x'"), std::string::npos)
      << p.error().message;
  auto r = KvEventPublisher::open(
      {.endpoint = "inproc://kv-events-test", .replay_endpoint = "tcp://256.0.0.1:1"}, dropped);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("--kv-events-replay 'tcp://256.0.0.1:1'"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace minfer::server
