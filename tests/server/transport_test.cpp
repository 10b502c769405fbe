// Stage 17 tests: the HTTP transport (server/transport.h) on loopback with a small
// handler of its own — the 503 answers while loading, a port in use, the body limit
// while reading (chunked and sized), keep-alive and pipelining, HEAD, chunked streams,
// the HTTP/2 preface, oversized headers, the connection cap — and the hand-written target decoding.
#include "server/transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace minfer::server {
namespace {

using namespace std::chrono_literals;

class TestHandler final : public http::Handler {
 public:
  bool on_head(http::Request& req, http::Response& res) override {
    last_over_capacity = req.over_capacity;
    if (req.path == "/early") {
      res.status = 403;
      res.set_content("early", "text/plain");
      return true;
    }
    return false;
  }
  void on_request(http::Request& req, http::Response& res) override {
    if (req.path == "/stream") {
      auto n = std::make_shared<int>(0);
      res.set_chunked("text/event-stream", [n](http::StreamSink& sink) {
        if (*n == 3) {
          sink.done();
          return true;
        }
        return sink.write("data: " + std::to_string((*n)++) + "\n\n");
      });
      return;
    }
    res.set_content(req.method + " " + req.path + " q=" + req.param("q") + " body=" + req.body,
                    "text/plain");
  }
  void on_refused(const http::Request&, http::Response& res) override {
    res.set_content("refused " + std::to_string(res.status), "text/plain");
  }
  void on_done(const http::Request&, const http::Response&) override { ++done; }
  std::atomic<int> done{0};
  std::atomic<bool> last_over_capacity{false};
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, const std::string& s) {
  EXPECT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

// Reads until `until` is in what came (or the connection ends).
std::string read_until(int fd, const std::string& until) {
  std::string got;
  char buf[4096];
  while (got.find(until) == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

std::string read_to_end(int fd) {
  return read_until(fd, std::string(1, '\0') + "never");
}

// One request on its own connection; the whole answer (the server closes after it).
std::string exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  send_all(fd, request);
  std::string got = read_to_end(fd);
  ::close(fd);
  return got;
}

class Transport : public ::testing::Test {
 protected:
  void start(TransportOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    auto bound = HttpServer::bind(o);
    ASSERT_TRUE(bound.ok()) << bound.error().message;
    server_ = std::move(*bound);
    std::promise<void> serving;
    thread_ = std::thread(
        [this, &serving] { server_->serve(handler_, [&serving] { serving.set_value(); }); });
    serving.get_future().wait();  // requests reach the handler from here
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return server_->port(); }
  TestHandler handler_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

TEST(TransportLoading, Answers503UntilServeThenTheHandler) {
  auto bound = HttpServer::bind(TransportOptions{.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(bound.ok()) << bound.error().message;
  HttpServer& server = **bound;
  const std::string health =
      exchange(server.port(), "GET /health?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(health.rfind("HTTP/1.1 503 ", 0), 0u) << health;
  EXPECT_NE(health.find("Retry-After: 1\r\n"), std::string::npos) << health;
  EXPECT_NE(health.find("\r\n\r\n{\"status\":\"loading model\"}"), std::string::npos) << health;
  const std::string other = exchange(server.port(), "GET /v1/models HTTP/1.1\r\n\r\n");
  EXPECT_NE(other.find("\"type\":\"unavailable_error\""), std::string::npos) << other;
  TestHandler handler;
  std::promise<void> serving;
  std::thread t([&] { server.serve(handler, [&] { serving.set_value(); }); });
  serving.get_future().wait();
  const std::string served =
      exchange(server.port(), "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(served.rfind("HTTP/1.1 200 ", 0), 0u) << served;
  server.stop();
  t.join();
}

TEST(TransportBind, PortInUseIsAnError) {
  auto first = HttpServer::bind(TransportOptions{.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(first.ok());
  auto second = HttpServer::bind(TransportOptions{.host = "127.0.0.1", .port = (*first)->port()});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find("is in use"), std::string::npos) << second.error().message;
}

TEST_F(Transport, KeepAliveAndPipelinedRequestsAreAnsweredInOrder) {
  start();
  const int fd = connect_to(port());
  send_all(fd,
           "GET /a?q=x%20y HTTP/1.1\r\nHost: x\r\n\r\n"
           "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
           "GET /c HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = read_until(fd, "GET /c q= body=");
  const size_t a = got.find("GET /a q=x y body=");
  const size_t b = got.find("POST /b q= body=abc");
  const size_t c = got.find("GET /c q= body=");
  ASSERT_NE(a, std::string::npos) << got;
  ASSERT_NE(b, std::string::npos) << got;
  ASSERT_NE(c, std::string::npos) << got;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  // Still open: one more request on the same connection.
  send_all(fd, "GET /d HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(read_until(fd, "GET /d q= body=").find("GET /d q= body="), std::string::npos);
  ::close(fd);
}

TEST_F(Transport, HeadHasTheLengthAndNoBody) {
  start();
  const std::string got = exchange(port(), "HEAD /x HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
  EXPECT_NE(got.find("Content-Length: 16\r\n"), std::string::npos) << got;  // "HEAD /x q= body="
  EXPECT_EQ(got.substr(got.find("\r\n\r\n") + 4), "");
}

TEST_F(Transport, BodyPastTheLimitIs413WhileReadingChunkedAndClosed) {
  start(TransportOptions{.max_body_bytes = 1024});
  const int fd = connect_to(port());
  send_all(fd, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string piece = "400\r\n" + std::string(1024, 'a') + "\r\n";
  send_all(fd, piece);
  send_all(fd, piece);
  const std::string got = read_to_end(fd);
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 413 ", 0), 0u) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("refused 413"), std::string::npos) << got;
  // Within the limit: read whole.
  const std::string ok =
      exchange(port(), "POST /y HTTP/1.1\r\nConnection: close\r\nContent-Length: 1024\r\n\r\n" +
                           std::string(1024, 'b'));
  EXPECT_NE(ok.find("POST /y q= body=" + std::string(1024, 'b')), std::string::npos);
}

TEST_F(Transport, AnswerBeforeTheBodyClosesTheConnection) {
  start();
  const std::string got =
      exchange(port(), "POST /early HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(got.rfind("HTTP/1.1 403 ", 0), 0u) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
}

TEST_F(Transport, StreamIsChunkedToItsLastChunk) {
  start();
  const std::string got = exchange(port(), "GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << got;
  const std::string body = got.substr(got.find("\r\n\r\n") + 4);
  EXPECT_EQ(body, "9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n");
}

TEST_F(Transport, Http2PrefaceIs505AndClose) {
  start();
  const std::string got = exchange(port(), "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 505 ", 0), 0u) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
}

TEST_F(Transport, HeadersPast64KiBAre431AndClose) {
  start();
  const std::string got =
      exchange(port(), "GET /x HTTP/1.1\r\nX-Big: " + std::string(70000, 'a') + "\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 431 ", 0), 0u) << got.substr(0, 200);
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got.substr(0, 200);
}

TEST_F(Transport, ConnectionsPastTheCapAreMarked) {
  start(TransportOptions{.max_connections = 1});
  const int idle = connect_to(port());
  std::this_thread::sleep_for(100ms);
  const std::string got = exchange(port(), "GET /x HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
  EXPECT_TRUE(handler_.last_over_capacity.load());
  ::close(idle);
}

TEST(HttpTarget, PercentDecodingAndQueries) {
  EXPECT_EQ(http::percent_decode("/a%20b+c", false), "/a b+c");
  EXPECT_EQ(http::percent_decode("a%20b+c", true), "a b c");
  EXPECT_EQ(http::percent_decode("%zz%4", true), "%zz%4");  // bad escapes stay
  EXPECT_EQ(http::percent_decode("%", false), "%");
  const http::Params p = http::parse_query("a=1&b=x%3Dy&&c&a=2");
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p.count("a"), 2u);
  EXPECT_EQ(p.find("b")->second, "x=y");
  EXPECT_EQ(p.find("c")->second, "");
}

}  // namespace
}  // namespace minfer::server
