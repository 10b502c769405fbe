// Stage 17 (HTTP): KV events — the slots' cached prefixes published to routers over ZMQ
// in vLLM's schema (vllm/distributed/kv_events.py: KVEventBatch, ZmqEventPublisher).
// Invariants: a block is `block_size` consecutive tokens of a slot's cells, starting at
// a multiple of block_size; only full blocks exist; a block's hash chains its parent's,
// so equal prefixes have equal hashes in every slot and every replica; the set a
// subscriber builds from the events equals KvBlockIndex's set of distinct hashes (a
// hash is Stored when its first holder appears, Removed when its last one goes); the
// inference thread never waits on ZMQ (publish() only moves a batch into a bounded
// queue; when full, the oldest batch is dropped and counted, leaving a gap in the
// sequence numbers).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/result.h"
#include "engine/batch.h"

namespace minfer::server {

// The block hash (docs/USAGE.md "KV events"): XXH3-64 with this seed over the parent's
// hash (8 bytes, little-endian; 0 for a sequence's first block) followed by the block's
// token ids (4 bytes each, little-endian).
inline constexpr uint64_t kKvBlockHashSeed = 0x6d696e666572;  // "minfer" in ASCII
uint64_t kv_block_hash(uint64_t parent, std::span<const engine::TokenId> tokens);

struct KvEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kAllCleared };
  Kind kind = Kind::kStored;
  std::vector<uint64_t> hashes;         // kStored: root first; kRemoved: any order
  std::optional<uint64_t> parent;       // kStored: the first block's parent (none: a root)
  std::vector<engine::TokenId> tokens;  // kStored: block_size tokens per hash, in order
};

// vLLM's wire form of one batch: msgpack of [ts, [event...], data_parallel_rank] (the
// batch is msgspec array_like), each event a map tagged by its class name under "type"
// (msgspec tag=True; field order as vLLM declares them):
//   {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids",
//    "block_size", "lora_id", "medium", "lora_name"}
//   {"type": "BlockRemoved", "block_hashes", "medium"}
//   {"type": "AllBlocksCleared"}
// lora_id, medium and lora_name are nil: no adapters, one KV store.
std::string encode_kv_batch(double ts, std::span<const KvEvent> events, uint32_t block_size);

// The distinct blocks held by the slots, with one reference per (slot, block). Inference
// thread only.
class KvBlockIndex {
 public:
  KvBlockIndex(uint32_t block_size, size_t n_slots);
  // Brings every slot's blocks to the full blocks of `cached[i]` (slot i's tokens in the
  // KV, position 0 first), appending the events of the change to `out`: first the
  // Stored runs of hashes that gained their first holder, then one Removed of those that
  // lost their last (deepest first).
  void update(std::span<const std::span<const engine::TokenId>> cached, std::vector<KvEvent>& out);
  // Forgets every block; appends AllBlocksCleared.
  void clear(std::vector<KvEvent>& out);
  size_t n_blocks() const { return refs_.size(); }
  uint32_t block_size() const { return block_size_; }

 private:
  struct SlotBlocks {
    std::vector<engine::TokenId> tokens;  // the tokens of its full blocks
    std::vector<uint64_t> hashes;
  };
  uint32_t block_size_;
  std::vector<SlotBlocks> slots_;
  std::vector<size_t> keep_;                  // per slot: blocks unchanged by this update
  std::vector<std::vector<uint64_t>> fresh_;  // per slot: hashes of its new blocks
  std::unordered_map<uint64_t, uint32_t> refs_;
};

// A bounded FIFO between one producer that must never wait and one consumer thread:
// push() into a full queue drops the oldest item (and says so, for the caller to count).
template <typename T>
class DropOldestQueue {
 public:
  explicit DropOldestQueue(size_t capacity) : capacity_(capacity) {
    MINFER_CHECK(capacity > 0, "DropOldestQueue: capacity 0");
  }
  // True when the oldest item was dropped to make room.
  bool push(T item) {
    bool dropped = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (items_.size() >= capacity_) {
        items_.pop_front();
        dropped = true;
      }
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
    return dropped;
  }
  // No more items will come; take() returns what is left, then reports closed.
  void close() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      closed_ = true;
    }
    cv_.notify_one();
  }
  // Waits up to `wait` (negative: until an item or close()) and moves every item into
  // `out`, oldest first. False once closed: `out` then holds the last items.
  bool take(std::deque<T>& out, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lk(mu_);
    const auto ready = [this] { return closed_ || !items_.empty(); };
    if (wait.count() < 0) {
      cv_.wait(lk, ready);
    } else {
      cv_.wait_for(lk, wait, ready);
    }
    out.swap(items_);
    return !closed_;
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool closed_ = false;
};

struct KvEventsOptions {
  std::string endpoint;         // PUB socket; empty: no events (no thread, no socket)
  std::string replay_endpoint;  // ROUTER socket answering replay requests; empty: none
  std::string topic;            // first frame of every message (vLLM's default: empty)
  uint32_t block_size = 16;
  size_t max_queue = 10000;       // batches waiting for the publisher thread
  size_t replay_batches = 10000;  // the last batches kept for replay (vLLM's buffer_steps)
};

// A PUB socket (and the optional replay ROUTER) owned by one thread. Each batch is sent
// as the multipart message [topic, seq (8 bytes big-endian), payload]; a replay request
// [identity, "", start seq (8 bytes big-endian)] is answered with every kept batch from
// that seq on, each [identity, "", seq, payload], then [identity, "", -1 (8 bytes), ""].
// The endpoint is bound when it holds "*", "::", or is ipc:// or inproc://, connected to
// otherwise (vLLM's rule); the replay endpoint is always bound.
class KvEventPublisher {
 public:
  // Opens and binds/connects the sockets: an endpoint ZMQ refuses is an error naming it.
  static Result<std::unique_ptr<KvEventPublisher>> open(const KvEventsOptions& options,
                                                        std::atomic<uint64_t>& dropped);
  // Sends what is queued (a subscriber that went away loses it, nothing waits on it),
  // then closes the sockets.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues one batch under the next sequence number; never blocks on ZMQ.
  void publish(std::vector<KvEvent> events);

 private:
  struct Pending {
    uint64_t seq = 0;
    double ts = 0.0;
    std::vector<KvEvent> events;
  };
  KvEventPublisher(const KvEventsOptions& options, std::atomic<uint64_t>& dropped);
  void run();
  void serve_replay();

  KvEventsOptions options_;
  std::atomic<uint64_t>& dropped_;
  void* ctx_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  uint64_t next_seq_ = 0;  // publish()'s caller only
  DropOldestQueue<Pending> queue_;
  std::deque<std::pair<uint64_t, std::string>> sent_;  // the publisher thread's replay buffer
  std::thread thread_;
};

}  // namespace minfer::server
