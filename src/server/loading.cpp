// Stage 17 (HTTP): LoadingResponder (loading.h).
#include "server/loading.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace minfer::server {
namespace {

using Clock = std::chrono::steady_clock;

// The request line's path ("" when it did not come within `ms`).
std::string read_path(int fd, int ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  std::string head;
  char buf[1024];
  while (!LoadingResponder::head_complete(head)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return "";
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return "";
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return "";
    head.append(buf, static_cast<size_t>(n));
  }
  return LoadingResponder::request_path(head);
}

void answer(int fd, const std::string& path) {
  const std::string res = LoadingResponder::response(path);
  size_t sent = 0;
  while (sent < res.size()) {
    const ssize_t n = ::send(fd, res.data() + sent, res.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
  // FIN after the answer; what the client still sends (a body) is read and dropped
  // briefly, so it gets the answer rather than a reset.
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  while (::poll(&p, 1, 100) > 0 && ::recv(fd, buf, sizeof(buf), 0) > 0) {
  }
}

}  // namespace

bool LoadingResponder::head_complete(std::string_view head) {
  return head.find("\r\n") != std::string_view::npos || head.size() >= kMaxHeadBytes;
}

std::string LoadingResponder::request_path(std::string_view head) {
  // "GET /health HTTP/1.1": the second word, without a query.
  const size_t a = head.find(' ');
  if (a == std::string_view::npos) return "";
  const size_t b = head.find_first_of(" ?\r", a + 1);
  return std::string(
      head.substr(a + 1, b == std::string_view::npos ? std::string_view::npos : b - a - 1));
}

std::string LoadingResponder::response(std::string_view path) {
  const std::string body =
      path == "/health"
          ? std::string(R"({"status":"loading model"})")
          : std::string(
                R"({"error":{"message":"loading model","type":"unavailable_error","code":503}})");
  return fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
}

LoadingResponder::LoadingResponder(int listen_fd) : listen_fd_(listen_fd) {
  thread_ = std::thread([this] { run(); });
}

LoadingResponder::~LoadingResponder() {
  stop();
}

void LoadingResponder::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void LoadingResponder::run() {
  while (!stop_.load()) {
    pollfd p{.fd = listen_fd_, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    answer(fd, read_path(fd, kReadMs));
    ::close(fd);
  }
}

}  // namespace minfer::server
