// Stage 17 (HTTP): the transport on Boost.Beast over Boost.Asio (Debian libboost-dev,
// header-only). One I/O thread runs every socket (accepts, request heads, bodies, writes,
// timers), so idle keep-alive connections and slow senders hold no thread; a request
// whose head is read runs on a worker thread (started on demand, parked when idle) from
// its on_head to its log line, since the routes block while the scheduler generates.
// Invariants: sockets, parsers and buffers are touched on the I/O thread only; a worker
// reaches its connection through Session's locked byte queue (writes) and a peek of
// the socket (has the client left?); the inference thread is never involved here.
#include <fmt/format.h>
#include <linux/sockios.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/transport.h"

namespace minfer::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// Request heads larger than this are a 431 (Beast's default is 8 KiB; browsers and
// SDKs stay far below either).
constexpr uint32_t kMaxHeadBytes = 64 << 10;
// A connection closed after a body left unread reads (and drops) what the client still
// sends for this long, so a client that sends its whole body before it reads (Python's
// http.client, requests) gets the answer rather than a reset.
constexpr auto kLinger = std::chrono::seconds(2);

// Threads for the requests being served: one per request from its head to its log line
// (routes block while the scheduler generates), started when none is idle, parked for
// the next request, at most `max` (more requests wait their turn).
class Workers {
 public:
  explicit Workers(size_t max) : max_(max == 0 ? 1 : max) {}
  ~Workers() { join(); }
  void run(std::function<void()> fn) {
    std::unique_lock<std::mutex> lk(mu_);
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > idle_ && threads_.size() < max_) threads_.emplace_back([this] { work(); });
    lk.unlock();
    cv_.notify_one();
  }
  // Runs what is queued, then joins every thread.
  void join() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (std::thread& t : threads) t.join();
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lk, [this] { return !jobs_.empty() || stop_; });
      --idle_;
      if (jobs_.empty()) return;
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lk.unlock();
      fn();
      lk.lock();
    }
  }
  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

// The answer while the model loads: 503, /health {"status":"loading model"}, any other
// path the OpenAI error shape; Retry-After: 1; the connection closed.
http::Response loading_answer(const std::string& path) {
  http::Response res;
  res.status = 503;
  res.set_content(
      path == "/health"
          ? std::string(R"({"status":"loading model"})")
          : std::string(
                R"({"error":{"message":"loading model","type":"unavailable_error","code":503}})"),
      "application/json");
  res.set_header("Retry-After", "1");
  res.close = true;
  return res;
}

class Session;

// What every connection shares.
struct Shared {
  explicit Shared(const TransportOptions& o)
      : options(o), acceptor(ioc), workers(o.max_connections + kOverflowWorkers) {}
  // Requests past --max-connections are answered (503, or /health) by these many more.
  static constexpr size_t kOverflowWorkers = 4;
  TransportOptions options;
  net::io_context ioc;
  tcp::acceptor acceptor;
  Workers workers;
  std::atomic<http::Handler*> handler{nullptr};  // null while the model loads
  std::atomic<bool> stopping{false};
  std::atomic<size_t> n_open{0};
  std::mutex mu;  // guards sessions
  std::map<uint64_t, std::weak_ptr<Session>> sessions;
  uint64_t next_id = 0;  // I/O thread only
};

// One connection. The I/O thread reads a request head, hands the request to a worker,
// and reads the next one once the worker has written the response (requests on one
// connection are served in order; pipelined bytes wait in the buffer).
class Session final : public std::enable_shared_from_this<Session>,
                      public http::ClientLink,
                      public http::StreamSink {
 public:
  Session(Shared& shared, tcp::socket socket, bool over_capacity, uint64_t id)
      : shared_(shared),
        stream_(std::move(socket)),
        fd_(stream_.socket().native_handle()),
        over_capacity_(over_capacity),
        id_(id) {}
  ~Session() override { shared_.n_open.fetch_sub(1, std::memory_order_acq_rel); }

  void start() { wait_request(); }

  // From stop() (I/O thread): an idle connection closes now, a busy one after its
  // response, whose stream (if any) ends at its next write.
  void shut() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (!busy_) close();
  }

  // --- http::ClientLink (worker thread) ---
  bool gone() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (failed_) return true;
    }
    // The socket stays open while its worker runs (only the I/O thread closes it, and
    // not while busy_), so the descriptor is this connection's.
    char byte = 0;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;  // bytes wait (a pipelined request): the client is there
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }

  // --- http::StreamSink (worker thread) ---
  bool write(std::string_view data) override {
    if (failed()) return false;
    if (data.empty()) return true;
    return enqueue(fmt::format("{:x}\r\n", data.size()) + std::string(data) + "\r\n");
  }
  bool writable() override { return !failed() && !gone(); }
  void done() override {
    if (stream_done_) return;
    stream_done_ = true;
    enqueue("0\r\n\r\n");
  }
  // Unsent: the bytes queued here plus those in the socket's send queue (SIOCOUTQ),
  // since Linux grows a socket's send buffer to megabytes for a loopback client that
  // reads nothing; progress is that sum going down.
  bool drained_within(size_t max_unsent, std::chrono::milliseconds stall) override {
    std::unique_lock<std::mutex> lk(mu_);
    size_t last = SIZE_MAX;
    auto deadline = Clock::now() + stall;
    for (;;) {
      if (failed_ || stopping_) return false;
      int in_socket = 0;
      if (::ioctl(fd_, SIOCOUTQ, &in_socket) != 0) return false;
      const size_t unsent = unsent_ + static_cast<size_t>(std::max(in_socket, 0));
      if (unsent <= max_unsent) return true;
      if (unsent < last) deadline = Clock::now() + stall;  // the client took bytes
      last = unsent;
      if (Clock::now() >= deadline) return false;
      cv_.wait_for(lk, std::chrono::milliseconds(10));
    }
  }

 private:
  // --- I/O thread ---
  void wait_request() {
    busy_ = false;
    if (shared_.stopping.load()) return close();
    if (buffer_.size() > 0) return read_head();  // a pipelined request
    // An idle connection (a new one, or kept alive) waits this long for a first byte.
    stream_.expires_after(std::chrono::seconds(shared_.options.keep_alive_timeout_s));
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec) return self->close();
                              self->buffer_.commit(n);
                              self->read_head();
                            });
  }

  void read_head() {
    head_.emplace();
    head_->header_limit(kMaxHeadBytes);
    // A length past --max-body is the handler's 413. (Not boost::none: Boost 1.74's
    // parser compares the length with the optional, and any length exceeds "none".)
    head_->body_limit(std::numeric_limits<std::uint64_t>::max());
    // The whole head within --timeout.
    stream_.expires_after(std::chrono::seconds(shared_.options.timeout_s));
    bhttp::async_read_header(
        stream_, buffer_, *head_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
  }

  bool starts_with_h2_preface() const {
    constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n";
    const auto data = buffer_.data();
    const std::string_view got(static_cast<const char*>(data.data()), data.size());
    return got.substr(0, kPreface.size()) == kPreface;
  }

  void on_head(beast::error_code ec) {
    busy_ = true;
    req_ = http::Request{};
    res_ = http::Response{};
    refused_ = 0;
    if (ec == bhttp::error::header_limit) {
      refused_ = 431;
    } else if (ec == beast::error::timeout || ec == bhttp::error::end_of_stream ||
               ec == bhttp::error::partial_message || ec == net::error::eof ||
               ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      return close();  // the client left or stalled: nothing to answer
    } else if (ec == bhttp::error::bad_version && starts_with_h2_preface()) {
      // An HTTP/2 client with prior knowledge opens with "PRI * HTTP/2.0" (RFC 9113
      // §3.4), a version Beast refuses: a 505 at once, then the connection closes, so
      // the client falls back to HTTP/1.1 (sglang-router does).
      refused_ = 505;
      req_.method = "PRI";
      req_.target = req_.path = "*";
    } else if (ec) {
      refused_ = 400;
    }
    stream_.expires_never();
    if (refused_ == 0) {
      const auto& h = head_->get();
      req_.method = std::string(h.method_string());
      req_.target = std::string(h.target());
      const size_t q = req_.target.find('?');
      req_.path = http::percent_decode(std::string_view(req_.target).substr(0, q), false);
      if (q != std::string::npos) {
        req_.params = http::parse_query(std::string_view(req_.target).substr(q + 1));
      }
      for (const auto& f : h) {
        req_.headers.emplace(std::string(f.name_string()), std::string(f.value()));
      }
      keep_alive_ = h.keep_alive();
      head_request_ = h.method() == bhttp::verb::head;
    }
    req_.over_capacity = over_capacity_;
    req_.client = this;
    shared_.workers.run([self = shared_from_this()] { self->serve(); });
  }

  // Reads the body under --max-body (Beast stops at the first byte past it, chunked or
  // sized); `done` gets 0, or the status of the refusal (413 past the limit, 400).
  void read_body(std::function<void(int)> on_read) {
    body_.emplace(std::move(*head_));
    body_->body_limit(shared_.options.max_body_bytes);
    stream_.expires_after(std::chrono::seconds(shared_.options.timeout_s));
    bhttp::async_read(
        stream_, buffer_, *body_,
        [self = shared_from_this(), on_read = std::move(on_read)](beast::error_code ec, size_t) {
          self->stream_.expires_never();
          if (!ec) self->req_.body = std::move(self->body_->get().body());
          self->body_.reset();
          on_read(!ec ? 0 : ec == bhttp::error::body_limit ? 413 : 400);
        });
  }

  // Writes what the queue holds, one write at a time.
  void flush() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      inflight_.swap(pending_);
      pending_.clear();
      if (inflight_.empty() || failed_) {
        writing_ = false;
        cv_.notify_all();
        return;
      }
    }
    if (write_timeout_) {
      stream_.expires_after(std::chrono::seconds(shared_.options.timeout_s));
    } else {
      stream_.expires_never();
    }
    net::async_write(stream_, net::buffer(inflight_),
                     [self = shared_from_this()](beast::error_code ec, size_t n) {
                       {
                         std::lock_guard<std::mutex> lk(self->mu_);
                         self->unsent_ -= std::min(self->unsent_, n);
                         if (ec) self->failed_ = true;
                         self->inflight_.clear();
                       }
                       self->cv_.notify_all();
                       self->flush();
                     });
  }

  // After the response (I/O thread): the next request, or the end.
  void finish(bool close_after) {
    if (close_after || !keep_alive_) return linger_close();
    wait_request();
  }

  // FIN after what is written; what the client still sends is read and dropped for
  // kLinger, then the socket closes.
  void linger_close() {
    busy_ = false;  // stop() may cut the lingering short
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(kLinger);
    drain();
  }
  void drain() {
    scratch_.resize(16384);
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->close();
                              self->drain();
                            });
  }

  void close() {
    busy_ = false;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    std::lock_guard<std::mutex> lk(shared_.mu);
    shared_.sessions.erase(id_);
  }

  // --- worker thread ---
  bool failed() {
    std::lock_guard<std::mutex> lk(mu_);
    return failed_ || stopping_;
  }

  // Queues bytes for the client; false once the connection has failed.
  bool enqueue(std::string bytes) {
    bool start = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (failed_) return false;
      unsent_ += bytes.size();
      pending_ += bytes;
      if (!writing_) start = writing_ = true;
    }
    if (start) net::post(shared_.ioc, [self = shared_from_this()] { self->flush(); });
    return true;
  }

  // Waits until every queued byte is written or the connection failed: false then.
  bool wait_written() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return failed_ || (unsent_ == 0 && !writing_); });
    return !failed_;
  }
  // The same within --timeout (a stream's last bytes, written without a timer): false
  // when they are not all taken by then.
  bool wait_written_within_timeout() {
    std::unique_lock<std::mutex> lk(mu_);
    const bool done_in_time =
        cv_.wait_for(lk, std::chrono::seconds(shared_.options.timeout_s),
                     [this] { return failed_ || (unsent_ == 0 && !writing_); });
    return done_in_time && !failed_;
  }

  // The response head (and body, unless streamed or HEAD) as bytes.
  std::string serialize(const http::Response& res, bool close_after) {
    bhttp::response<bhttp::empty_body> head;
    head.version(11);
    head.result(static_cast<unsigned>(res.status));
    for (const auto& [k, v] : res.headers) head.insert(k, v);
    if (!res.content_type.empty()) head.set(bhttp::field::content_type, res.content_type);
    if (res.provider) {
      head.chunked(true);
    } else if (res.status != 204 && res.status != 304) {
      head.content_length(res.body.size());
    }
    head.keep_alive(!close_after);
    std::ostringstream os;
    os << head.base();
    std::string out = os.str();
    if (!res.provider && !head_request_) out += res.body;
    return out;
  }

  // Writes `res` (its chunks from its provider when it streams) and waits until it is
  // written; true when the connection can carry another request.
  bool respond(http::Response& res) {
    const bool close_after = res.close || !keep_alive_ || shared_.stopping.load();
    if (!res.provider) {
      write_timeout_ = true;
      return enqueue(serialize(res, close_after)) && wait_written() && !close_after;
    }
    // A stream: written as its provider makes chunks, without --timeout per write (a
    // stream's reader has --stream-timeout: the provider's backpressure).
    write_timeout_ = false;
    stream_done_ = false;
    bool finished = enqueue(serialize(res, close_after));
    if (head_request_) {
      finished = finished && wait_written();
      if (res.release) res.release(false);
      return finished && !close_after;
    }
    while (finished && !stream_done_) {
      if (!res.provider(*this)) finished = false;
    }
    write_timeout_ = true;
    finished = finished && wait_written_within_timeout();
    if (!finished) {
      // A stream that ended before its last chunk (the client left or stalled): the
      // connection closes at once, its unsent bytes dropped.
      std::lock_guard<std::mutex> lk(mu_);
      failed_ = true;
    }
    if (res.release) res.release(finished);
    return finished && !close_after;
  }

  // One request, from its head to its log line.
  void serve() {
    http::Handler* handler = shared_.handler.load();
    bool reuse = false;
    if (handler == nullptr) {
      http::Response res = loading_answer(refused_ == 0 ? req_.path : "");
      respond(res);
    } else if (refused_ != 0) {
      res_.status = refused_;
      handler->on_refused(req_, res_);
      res_.close = true;
      respond(res_);
      handler->on_done(req_, res_);
    } else if (handler->on_head(req_, res_)) {
      if (req_.has_body()) res_.close = true;  // the body stays unread
      reuse = respond(res_);
      handler->on_done(req_, res_);
    } else {
      int refused = 0;
      if (req_.has_body()) {
        if (::strcasecmp(req_.header("Expect").c_str(), "100-continue") == 0) {
          enqueue("HTTP/1.1 100 Continue\r\n\r\n");
        }
        std::promise<int> body_read;
        std::future<int> got = body_read.get_future();
        net::post(shared_.ioc, [self = shared_from_this(), &body_read] {
          self->read_body([&body_read](int status) { body_read.set_value(status); });
        });
        refused = got.get();
      }
      if (refused != 0) {
        res_.status = refused;
        if (refused == 400) res_.body = "the request body could not be read";
        res_.close = true;  // the rest of the body cannot carry another request
        handler->on_refused(req_, res_);
      } else {
        handler->on_request(req_, res_);
      }
      reuse = respond(res_);
      handler->on_done(req_, res_);
    }
    // Keep-alive: the next request once this one is written; else a polite close.
    // A connection past the cap, a failed one or a server that stops ends here.
    const bool failed_now = failed();
    net::post(shared_.ioc, [self = shared_from_this(), reuse, failed_now] {
      if (failed_now) return self->close();
      self->finish(!reuse);
    });
  }

  Shared& shared_;
  beast::tcp_stream stream_;
  const int fd_;
  const bool over_capacity_;
  const uint64_t id_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::empty_body>> head_;
  std::optional<bhttp::request_parser<bhttp::string_body>> body_;
  std::vector<char> scratch_;
  // Set on the I/O thread before the worker starts, read by it (the post orders them).
  http::Request req_;
  http::Response res_;
  int refused_ = 0;
  bool keep_alive_ = true;
  bool head_request_ = false;
  bool busy_ = false;  // I/O thread: a worker has the request
  // The write queue, shared by the worker (producer) and the I/O thread (writer).
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;   // bytes not yet handed to a write
  std::string inflight_;  // the write in progress (I/O thread)
  size_t unsent_ = 0;     // queued or in flight
  bool writing_ = false;
  bool failed_ = false;
  bool stopping_ = false;
  std::atomic<bool> write_timeout_{true};
  bool stream_done_ = false;  // worker thread
};

void accept_next(Shared& shared) {
  shared.acceptor.async_accept([&shared](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !shared.acceptor.is_open()) return;
    if (!ec) {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks go out at once
      const bool over = shared.n_open.fetch_add(1) >= shared.options.max_connections;
      auto session = std::make_shared<Session>(shared, std::move(socket), over, shared.next_id);
      {
        std::lock_guard<std::mutex> lk(shared.mu);
        shared.sessions.emplace(shared.next_id++, session);
      }
      session->start();
      return accept_next(shared);
    }
    // Out of descriptors (EMFILE) or the like: try again shortly rather than spin.
    auto timer = std::make_shared<net::steady_timer>(shared.ioc, std::chrono::milliseconds(50));
    timer->async_wait([&shared, timer](beast::error_code) { accept_next(shared); });
  });
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(const TransportOptions& o) : shared(o) {}
  Shared shared;
  int port = 0;
  std::thread io;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  if (impl_->io.joinable()) {
    stop();
    impl_->io.join();
  }
}

int HttpServer::port() const {
  return impl_->port;
}

Result<std::unique_ptr<HttpServer>> HttpServer::bind(const TransportOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  Shared& sh = impl->shared;
  beast::error_code ec;
  const auto address =
      net::ip::make_address(options.host == "localhost" ? "127.0.0.1" : options.host, ec);
  if (ec) return make_error(fmt::format("serve: cannot bind {}: {}", options.host, ec.message()));
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  sh.acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only (a restart binds at once); never SO_REUSEPORT, which would let a
  // second server bind a busy port and take half its connections.
  if (!ec) sh.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) sh.acceptor.bind(endpoint, ec);
  if (ec == net::error::address_in_use) {
    return make_error(fmt::format("{}:{} is in use", options.host, options.port));
  }
  if (!ec) sh.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return make_error(
        fmt::format("serve: cannot bind {}:{}: {}", options.host, options.port, ec.message()));
  }
  impl->port = sh.acceptor.local_endpoint().port();
  accept_next(sh);
  // Answering from here: 503 "loading model" until serve() gives the handler.
  impl->io = std::thread([&sh] {
    auto guard = net::make_work_guard(sh.ioc);
    while (!sh.stopping.load() || sh.n_open.load() > 0) {
      sh.ioc.run_for(std::chrono::milliseconds(50));
      if (sh.ioc.stopped()) sh.ioc.restart();
    }
  });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::serve(http::Handler& handler, const std::function<void()>& on_serving) {
  impl_->shared.handler.store(&handler);
  if (on_serving) on_serving();
  impl_->io.join();  // returns once stop() has closed every connection
  impl_->shared.workers.join();
  impl_->shared.handler.store(nullptr);
}

void HttpServer::stop() {
  Shared& sh = impl_->shared;
  if (sh.stopping.exchange(true)) return;
  net::post(sh.ioc, [&sh] {
    beast::error_code ec;
    sh.acceptor.close(ec);
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lk(sh.mu);
      for (auto& [id, weak] : sh.sessions) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live) s->shut();
  });
}

}  // namespace minfer::server
