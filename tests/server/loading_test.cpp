// Stage 17 tests: the loading responder's own HTTP reading (server/loading.h) — when it
// stops reading, which path it takes from the request line, the 503 it answers — on
// odd input (empty, no CRLF, a huge line, NUL bytes, non-ASCII, queries), and once over
// a loopback socket with the request line sent in two pieces.
#include "server/loading.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace minfer::server {
namespace {

using namespace std::string_literals;

TEST(LoadingResponder, HeadIsCompleteAtTheFirstCrlfOrTheByteCap) {
  EXPECT_FALSE(LoadingResponder::head_complete(""));
  EXPECT_FALSE(LoadingResponder::head_complete("GET /health HTTP/1.1"));
  EXPECT_FALSE(LoadingResponder::head_complete("GET /health HTTP/1.1\r"));
  EXPECT_FALSE(LoadingResponder::head_complete("GET /health HTTP/1.1\n"));  // LF alone
  EXPECT_TRUE(LoadingResponder::head_complete("GET /health HTTP/1.1\r\n"));
  EXPECT_TRUE(LoadingResponder::head_complete("\r\n"));
  EXPECT_TRUE(LoadingResponder::head_complete("GET /\0x HTTP/1.1\r\nHost: a\r\n"s));
  const std::string huge(LoadingResponder::kMaxHeadBytes - 1, 'a');
  EXPECT_FALSE(LoadingResponder::head_complete(huge));
  EXPECT_TRUE(LoadingResponder::head_complete(huge + "a"));
  EXPECT_TRUE(LoadingResponder::head_complete(huge + "a\r\n"));
}

TEST(LoadingResponder, PathIsTheRequestLinesSecondWordWithoutItsQuery) {
  const std::pair<std::string, std::string> cases[] = {
      {"GET /health HTTP/1.1\r\n", "/health"},
      {"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", "/health"},
      {"GET /healthz HTTP/1.1\r\n", "/healthz"},
      {"GET /healthz", "/healthz"},  // no CRLF: up to the end
      {"GET /health", "/health"},
      {"GET /health?verbose=1 HTTP/1.1\r\n", "/health"},
      {"GET /v1/models?a=1&b=2 HTTP/1.1\r\n", "/v1/models"},
      {"GET ?x HTTP/1.1\r\n", ""},
      {"GET /health\r\n", "/health"},  // HTTP/0.9 style: the CR ends it
      {"HEAD / HTTP/1.1\r\n", "/"},
      {"", ""},
      {"GET", ""},
      {"GET\r\n", ""},
      {" ", ""},
      {"GET  /health HTTP/1.1\r\n", ""},  // two spaces: the second word is empty
      {"GET /h\xc3\xa9"
       "alth HTTP/1.1\r\n",
       "/h\xc3\xa9"
       "alth"},
      {"GET /\xff\xfe HTTP/1.1\r\n", "/\xff\xfe"},
      {"GET /hea\0lth HTTP/1.1\r\n"s, "/hea\0lth"s},
      {"\0 /health HTTP/1.1\r\n"s, "/health"},
  };
  for (const auto& [head, want] : cases) {
    EXPECT_EQ(LoadingResponder::request_path(head), want) << "head: " << head;
  }
  // A huge line: the whole rest (the read stops at kMaxHeadBytes, the parse has no cap).
  const std::string long_path = "/" + std::string(3 * LoadingResponder::kMaxHeadBytes, 'a');
  EXPECT_EQ(LoadingResponder::request_path("GET " + long_path), long_path);
  EXPECT_EQ(LoadingResponder::request_path("GET " + long_path + " HTTP/1.1\r\n"), long_path);
}

TEST(LoadingResponder, AnswersAre503WithTheHealthBodyOnlyForHealth) {
  const std::string health =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Content-Length: 26\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
      R"({"status":"loading model"})";
  EXPECT_EQ(LoadingResponder::response("/health"), health);
  const std::string other =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Content-Length: 75\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
      R"({"error":{"message":"loading model","type":"unavailable_error","code":503}})";
  for (const std::string& path : {"/healthz"s, "/health/"s, "/Health"s, ""s, "/health\0"s}) {
    EXPECT_EQ(LoadingResponder::response(path), other) << "path: " << path;
  }
}

// A loopback listener, the responder on it, and one client connection.
class LoadingSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listen_fd_, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(listen_fd_, 4), 0);
    socklen_t len = sizeof addr_;
    ASSERT_EQ(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr_), &len), 0);
  }
  void TearDown() override {
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }
  // Sends `pieces` (20 ms apart) on a new connection and reads the answer to its end.
  std::string exchange(const std::vector<std::string>& pieces) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_), 0);
    for (const auto& p : pieces) {
      EXPECT_EQ(::send(fd, p.data(), p.size(), MSG_NOSIGNAL), static_cast<ssize_t>(p.size()));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
      got.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return got;
  }
  int listen_fd_ = -1;
  sockaddr_in addr_{};
};

TEST_F(LoadingSocket, RequestLineInPiecesGetsThePathsAnswer) {
  LoadingResponder responder(listen_fd_);
  EXPECT_EQ(exchange({"GET /hea", "lth?probe=1 HTTP/1.1\r", "\nHost: x\r\n\r\n"}),
            LoadingResponder::response("/health"));
  EXPECT_EQ(exchange({"GET /v1/models HTTP/1.1\r\n\r\n"}),
            LoadingResponder::response("/v1/models"));
  // Nothing within kReadMs: the answer for no path.
  EXPECT_EQ(exchange({}), LoadingResponder::response(""));
  responder.stop();
}

}  // namespace
}  // namespace minfer::server
