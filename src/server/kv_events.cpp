// Stage 17 (HTTP): KV events — block hashes, the block index, vLLM's msgpack batch
// and the ZMQ publisher thread.
#include "server/kv_events.h"

#include <xxhash.h>
#include <zmq.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace minfer::server {
namespace {

// The msgpack subset the batch needs (github.com/msgpack/msgpack/blob/master/spec.md).
void put_be(std::string& out, uint64_t v, int n_bytes) {
  for (int i = n_bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void mp_array(std::string& out, size_t n) {
  if (n < 16) {
    out.push_back(static_cast<char>(0x90 | n));
  } else if (n <= 0xffff) {
    out.push_back(static_cast<char>(0xdc));
    put_be(out, n, 2);
  } else {
    out.push_back(static_cast<char>(0xdd));
    put_be(out, n, 4);
  }
}

void mp_map(std::string& out, size_t n) {
  MINFER_CHECK(n < 16, "mp_map: %zu entries (the events have at most 8)", n);
  out.push_back(static_cast<char>(0x80 | n));
}

void mp_uint(std::string& out, uint64_t v) {
  if (v < 128) {
    out.push_back(static_cast<char>(v));
  } else if (v <= 0xff) {
    out.push_back(static_cast<char>(0xcc));
    put_be(out, v, 1);
  } else if (v <= 0xffff) {
    out.push_back(static_cast<char>(0xcd));
    put_be(out, v, 2);
  } else if (v <= 0xffffffff) {
    out.push_back(static_cast<char>(0xce));
    put_be(out, v, 4);
  } else {
    out.push_back(static_cast<char>(0xcf));
    put_be(out, v, 8);
  }
}

void mp_int(std::string& out, int64_t v) {
  if (v >= 0) {
    mp_uint(out, static_cast<uint64_t>(v));
  } else if (v >= -32) {
    out.push_back(static_cast<char>(v));  // negative fixint
  } else {
    out.push_back(static_cast<char>(0xd3));
    put_be(out, static_cast<uint64_t>(v), 8);
  }
}

void mp_nil(std::string& out) {
  out.push_back(static_cast<char>(0xc0));
}

void mp_str(std::string& out, std::string_view s) {
  if (s.size() < 32) {
    out.push_back(static_cast<char>(0xa0 | s.size()));
  } else {
    out.push_back(static_cast<char>(0xd9 + (s.size() > 0xff) + (s.size() > 0xffff)));
    put_be(out, s.size(), s.size() > 0xffff ? 4 : s.size() > 0xff ? 2 : 1);
  }
  out.append(s);
}

void mp_f64(std::string& out, double v) {
  out.push_back(static_cast<char>(0xcb));
  put_be(out, std::bit_cast<uint64_t>(v), 8);
}

bool binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

std::string seq_bytes(uint64_t seq) {
  std::string s;
  put_be(s, seq, 8);
  return s;
}

// Sends `frames` as one multipart message without waiting: a PUB socket drops a message
// for a subscriber past its high-water mark, a ROUTER one for an identity that is gone.
void send_multipart(void* sock, std::span<const std::string_view> frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_send(sock, frames[i].data(), frames[i].size(), flags) < 0) return;
  }
}

}  // namespace

uint64_t kv_block_hash(uint64_t parent, std::span<const engine::TokenId> tokens) {
  // Little-endian bytes whatever the host: a router recomputes them in any language.
  std::string bytes;
  bytes.reserve(8 + 4 * tokens.size());
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((parent >> (8 * i)) & 0xff));
  for (const engine::TokenId t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), kKvBlockHashSeed);
}

std::string encode_kv_batch(double ts, std::span<const KvEvent> events, uint32_t block_size) {
  std::string out;
  mp_array(out, 3);
  mp_f64(out, ts);
  mp_array(out, events.size());
  for (const KvEvent& e : events) {
    switch (e.kind) {
      case KvEvent::Kind::kStored:
        mp_map(out, 8);
        mp_str(out, "type");
        mp_str(out, "BlockStored");
        mp_str(out, "block_hashes");
        mp_array(out, e.hashes.size());
        for (const uint64_t h : e.hashes) mp_uint(out, h);
        mp_str(out, "parent_block_hash");
        if (e.parent) {
          mp_uint(out, *e.parent);
        } else {
          mp_nil(out);
        }
        mp_str(out, "token_ids");
        mp_array(out, e.tokens.size());
        for (const engine::TokenId t : e.tokens) mp_int(out, t);
        mp_str(out, "block_size");
        mp_uint(out, block_size);
        // Fields without a default are always written (msgspec's omit_defaults keeps them).
        mp_str(out, "lora_id");
        mp_nil(out);
        mp_str(out, "medium");
        mp_nil(out);
        mp_str(out, "lora_name");
        mp_nil(out);
        break;
      case KvEvent::Kind::kRemoved:
        mp_map(out, 3);
        mp_str(out, "type");
        mp_str(out, "BlockRemoved");
        mp_str(out, "block_hashes");
        mp_array(out, e.hashes.size());
        for (const uint64_t h : e.hashes) mp_uint(out, h);
        mp_str(out, "medium");
        mp_nil(out);
        break;
      case KvEvent::Kind::kAllCleared:
        mp_map(out, 1);
        mp_str(out, "type");
        mp_str(out, "AllBlocksCleared");
        break;
    }
  }
  mp_uint(out, 0);  // data_parallel_rank: one engine per server
  return out;
}

KvBlockIndex::KvBlockIndex(uint32_t block_size, size_t n_slots)
    : block_size_(block_size), slots_(n_slots), keep_(n_slots), fresh_(n_slots) {
  MINFER_CHECK(block_size > 0, "KvBlockIndex: block_size %u", block_size);
}

void KvBlockIndex::update(std::span<const std::span<const engine::TokenId>> cached,
                          std::vector<KvEvent>& out) {
  MINFER_CHECK(cached.size() == slots_.size(), "KvBlockIndex::update: %zu slots, index has %zu",
               cached.size(), slots_.size());
  const size_t bs = block_size_;
  // Per slot: the leading blocks whose tokens did not change, and the hashes of the
  // blocks past them.
  for (size_t i = 0; i < slots_.size(); ++i) {
    const SlotBlocks& s = slots_[i];
    const std::span<const engine::TokenId> now = cached[i];
    const size_t n_full = now.size() / bs;
    const size_t n = std::min(s.tokens.size(), n_full * bs);
    const auto diff =
        std::mismatch(s.tokens.begin(), s.tokens.begin() + static_cast<ptrdiff_t>(n), now.begin());
    keep_[i] = static_cast<size_t>(diff.first - s.tokens.begin()) / bs;
    fresh_[i].clear();
    uint64_t parent = keep_[i] > 0 ? s.hashes[keep_[i] - 1] : 0;
    for (size_t b = keep_[i]; b < n_full; ++b) {
      parent = kv_block_hash(parent, now.subspan(b * bs, bs));
      fresh_[i].push_back(parent);
    }
  }
  // References taken before references dropped: a block moving from one slot to another
  // in the same update stays present and is announced neither way.
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::span<const engine::TokenId> now = cached[i];
    KvEvent* run = nullptr;  // the Stored event of the current run of new hashes
    for (size_t k = 0; k < fresh_[i].size(); ++k) {
      const uint64_t h = fresh_[i][k];
      const size_t b = keep_[i] + k;
      if (refs_[h]++ > 0) {
        run = nullptr;
        continue;
      }
      if (run == nullptr) {
        KvEvent e{.kind = KvEvent::Kind::kStored};
        if (b > 0) e.parent = k > 0 ? fresh_[i][k - 1] : slots_[i].hashes[b - 1];
        out.push_back(std::move(e));
        run = &out.back();
      }
      run->hashes.push_back(h);
      run->tokens.insert(run->tokens.end(), now.begin() + static_cast<ptrdiff_t>(b * bs),
                         now.begin() + static_cast<ptrdiff_t>((b + 1) * bs));
    }
  }
  KvEvent removed{.kind = KvEvent::Kind::kRemoved};
  for (size_t i = 0; i < slots_.size(); ++i) {
    SlotBlocks& s = slots_[i];
    for (size_t b = s.hashes.size(); b-- > keep_[i];) {
      const auto it = refs_.find(s.hashes[b]);
      MINFER_CHECK(it != refs_.end() && it->second > 0,
                   "KvBlockIndex: slot %zu block %zu has no reference", i, b);
      if (--it->second == 0) {
        removed.hashes.push_back(it->first);
        refs_.erase(it);
      }
    }
    s.hashes.resize(keep_[i]);
    s.hashes.insert(s.hashes.end(), fresh_[i].begin(), fresh_[i].end());
    s.tokens.assign(cached[i].begin(),
                    cached[i].begin() + static_cast<ptrdiff_t>(s.hashes.size() * bs));
  }
  if (!removed.hashes.empty()) out.push_back(std::move(removed));
}

void KvBlockIndex::clear(std::vector<KvEvent>& out) {
  for (SlotBlocks& s : slots_) {
    s.tokens.clear();
    s.hashes.clear();
  }
  refs_.clear();
  out.push_back({.kind = KvEvent::Kind::kAllCleared});
}

KvEventPublisher::KvEventPublisher(const KvEventsOptions& options, std::atomic<uint64_t>& dropped)
    : options_(options), dropped_(dropped), queue_(std::max<size_t>(options.max_queue, 1)) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::open(const KvEventsOptions& options,
                                                                 std::atomic<uint64_t>& dropped) {
  if (options.block_size == 0) return make_error("--kv-block-size must be at least 1");
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(options, dropped));
  p->ctx_ = zmq_ctx_new();
  if (p->ctx_ == nullptr) return make_error(std::string("kv events: ") + zmq_strerror(zmq_errno()));
  // Closing waits this long for queued messages to leave, then drops them.
  const int linger_ms = 200;
  p->pub_ = zmq_socket(p->ctx_, ZMQ_PUB);
  if (p->pub_ == nullptr) return make_error(std::string("kv events: ") + zmq_strerror(zmq_errno()));
  zmq_setsockopt(p->pub_, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
  const int hwm = 100000;  // vLLM's
  zmq_setsockopt(p->pub_, ZMQ_SNDHWM, &hwm, sizeof hwm);
  const std::string& ep = options.endpoint;
  if ((binds(ep) ? zmq_bind(p->pub_, ep.c_str()) : zmq_connect(p->pub_, ep.c_str())) != 0) {
    return make_error("--kv-events '" + ep + "': cannot " + (binds(ep) ? "bind" : "connect") +
                      ": " + zmq_strerror(zmq_errno()));
  }
  if (!options.replay_endpoint.empty()) {
    p->replay_ = zmq_socket(p->ctx_, ZMQ_ROUTER);
    if (p->replay_ == nullptr) {
      return make_error(std::string("kv events: ") + zmq_strerror(zmq_errno()));
    }
    zmq_setsockopt(p->replay_, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    if (zmq_bind(p->replay_, options.replay_endpoint.c_str()) != 0) {
      return make_error("--kv-events-replay '" + options.replay_endpoint +
                        "': cannot bind: " + zmq_strerror(zmq_errno()));
    }
  }
  p->thread_ = std::thread([raw = p.get()] { raw->run(); });
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  queue_.close();
  if (thread_.joinable()) thread_.join();
  if (pub_ != nullptr) zmq_close(pub_);
  if (replay_ != nullptr) zmq_close(replay_);
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
}

void KvEventPublisher::publish(std::vector<KvEvent> events) {
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (queue_.push({.seq = next_seq_++, .ts = ts, .events = std::move(events)})) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

void KvEventPublisher::run() {
  std::deque<Pending> work;
  for (;;) {
    // With a replay socket, wake up now and then to answer its requests.
    const bool open = queue_.take(work, std::chrono::milliseconds(replay_ != nullptr ? 10 : -1));
    for (Pending& p : work) {
      std::string payload = encode_kv_batch(p.ts, p.events, options_.block_size);
      const std::string seq = seq_bytes(p.seq);
      const std::string_view frames[] = {options_.topic, seq, payload};
      send_multipart(pub_, frames);
      if (replay_ != nullptr && options_.replay_batches > 0) {
        if (sent_.size() >= options_.replay_batches) sent_.pop_front();
        sent_.emplace_back(p.seq, std::move(payload));
      }
    }
    work.clear();
    if (replay_ != nullptr) serve_replay();
    if (!open) return;
  }
}

void KvEventPublisher::serve_replay() {
  for (;;) {
    zmq_pollitem_t item{.socket = replay_, .fd = 0, .events = ZMQ_POLLIN, .revents = 0};
    if (zmq_poll(&item, 1, 0) <= 0 || (item.revents & ZMQ_POLLIN) == 0) return;
    // One request: its frames, whatever their number (a malformed one is read whole and
    // ignored).
    std::vector<std::string> frames;
    int more = 1;
    while (more != 0) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, replay_, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    if (frames.size() != 3 || frames[2].size() != 8) {
      std::fprintf(stderr, "[server] kv events: ignoring a replay request of %zu frames\n",
                   frames.size());
      continue;
    }
    uint64_t start = 0;
    for (const char c : frames[2]) start = (start << 8) | static_cast<uint8_t>(c);
    for (const auto& [seq, payload] : sent_) {
      if (seq < start) continue;
      const std::string s = seq_bytes(seq);
      const std::string_view reply[] = {frames[0], "", s, payload};
      send_multipart(replay_, reply);
    }
    const std::string end = seq_bytes(~uint64_t{0});  // -1 as 8 bytes: the end marker
    const std::string_view last[] = {frames[0], "", end, ""};
    send_multipart(replay_, last);
  }
}

}  // namespace minfer::server
