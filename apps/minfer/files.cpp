// Stage 18 (CLI): input/output path checks (files.h).
#include "files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace minfer::cli {
namespace {

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

Result<std::string> read_input_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return make_error("cannot open '" + path + "': " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return make_error("'" + path + "' is a directory");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open '" + path + "': " + std::strerror(errno));
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return make_error("cannot read '" + path + "': " + std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status check_model_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return make_error("cannot open '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return make_error("'" + path + "' is " + kind_of(st.st_mode) + ", not a GGUF file");
  }
  return Ok{};
}

Status check_writable(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return make_error(flag + ": '" + path + "' is " + kind_of(st.st_mode));
    }
    if (::access(path.c_str(), W_OK) != 0) {
      return make_error(flag + ": '" + path + "' is not writable: " + std::strerror(errno));
    }
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return make_error(flag + ": folder '" + dir.string() + "' of '" + path + "' does not exist");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return make_error(flag + ": folder '" + dir.string() +
                      "' is not writable: " + std::strerror(errno));
  }
  return Ok{};
}

Status check_new_output(const std::string& path, const std::vector<std::string>& inputs, bool force,
                        const std::string& flag) {
  struct stat out {};
  if (::stat(path.c_str(), &out) == 0) {
    for (const std::string& in : inputs) {
      struct stat st {};
      if (::stat(in.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino) {
        return make_error(flag + ": '" + path + "' is the input '" + in +
                          "' (a tool never overwrites its own input)");
      }
    }
    if (!force) {
      return make_error(flag + ": '" + path + "' exists (pass --force to replace it)");
    }
  }
  return check_writable(path, flag);
}

}  // namespace minfer::cli
