// Stage 17 (HTTP): taking a connection back from httplib once its response is written.
#include "server/connection.h"

#include <dirent.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace minfer::server {
namespace {

struct Taken {
  bool marked = false;
  int fd = -1;      // the descriptor number httplib still holds
  ino_t inode = 0;  // of the dead-end socket put in its place
};
thread_local Taken t_taken;

bool endpoint_is(const sockaddr_storage& sa, socklen_t len, const std::string& addr, int port) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&sa), len, host, sizeof(host), serv,
                    sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  return addr == host && port == std::atoi(serv);
}

// The connected socket of this request: the one whose local and peer endpoints are the
// request's (unique among open sockets). -1 when none matches.
int find_socket(const httplib::Request& req) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
        ::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
      continue;
    }
    if (endpoint_is(peer, peer_len, req.remote_addr, req.remote_port) &&
        endpoint_is(local, local_len, req.local_addr, req.local_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

// Sends FIN after what is written, then reads and drops what the client still sends
// until it closes or `linger_ms` pass; then closes.
void linger_close(int fd, int linger_ms) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(linger_ms);
  char buf[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    if (::recv(fd, buf, sizeof(buf), 0) <= 0) break;
  }
  ::close(fd);
}

}  // namespace

void mark_close_after_response(httplib::Response& res) {
  res.set_header("Connection", "close");
  t_taken.marked = true;
}

void close_if_marked(const httplib::Request& req, int linger_ms) {
  if (!t_taken.marked) return;
  t_taken.marked = false;
  const int fd = find_socket(req);
  if (fd < 0) return;
  // httplib keeps its descriptor number: it now names one end of a socket pair whose
  // other end is closed, so httplib's next read sees end-of-stream, its next write
  // fails, and it closes the connection as it would any finished one.
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return;
  ::close(pair[1]);
  const int client = ::dup(fd);
  if (client < 0 || ::dup2(pair[0], fd) < 0) {
    if (client >= 0) ::close(client);
    ::close(pair[0]);
    return;
  }
  struct stat st {};
  ::fstat(pair[0], &st);
  ::close(pair[0]);
  t_taken.fd = fd;
  t_taken.inode = st.st_ino;
  linger_close(client, linger_ms);
}

int ClientWatch::fd() {
  if (fd_ == -2) fd_ = req_ != nullptr ? find_socket(*req_) : -1;
  return fd_;
}

bool ClientWatch::drained_within(size_t max_queued, std::chrono::milliseconds stall) {
  using Clock = std::chrono::steady_clock;
  if (fd() < 0) return true;
  auto queued = [this] {
    int n = 0;
    return ::ioctl(fd_, SIOCOUTQ, &n) == 0 ? static_cast<size_t>(n) : SIZE_MAX;
  };
  size_t last = SIZE_MAX;
  auto deadline = Clock::now() + stall;
  for (;;) {
    const size_t now_queued = queued();
    if (now_queued == SIZE_MAX) return false;
    if (now_queued < last) deadline = Clock::now() + stall;  // the client took bytes
    last = now_queued;
    // Also wait for room in the send buffer: a write that blocks would fail at
    // httplib's write timeout (--timeout), which may be shorter than `stall`.
    pollfd p{.fd = fd_, .events = POLLOUT | POLLRDHUP, .revents = 0};
    const int n = ::poll(&p, 1, 0);
    if (n > 0 && (p.revents & (POLLRDHUP | POLLERR | POLLHUP)) != 0) return false;
    if (now_queued <= max_queued && n > 0 && (p.revents & POLLOUT) != 0) return true;
    if (Clock::now() >= deadline) return false;
    // Woken early only by the client leaving (a closed or failed socket).
    p = pollfd{.fd = fd_, .events = POLLRDHUP, .revents = 0};
    if (::poll(&p, 1, 10) > 0) return false;
  }
}

bool ClientWatch::gone() {
  if (fd() < 0) return false;
  char byte = 0;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // bytes wait (a pipelined request): the client is there
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

bool on_taken_connection() {
  if (t_taken.fd < 0) return false;
  struct stat st {};
  if (::fstat(t_taken.fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == t_taken.inode) {
    return true;
  }
  t_taken.fd = -1;  // httplib has closed it; the number may name a new connection now
  return false;
}

}  // namespace minfer::server
