// Stage 1 (core): diagnostics go to stderr, never stdout (stdout carries only
// generated text and command output). Informational lines — load lines, notices,
// timings, warnings that are not errors — go through log_info, so one switch
// (`--log-disable`) silences them all; errors are printed directly and always appear.
#pragma once

#include <fmt/core.h>

#include <atomic>
#include <cstdio>

namespace minfer {

namespace detail {
inline std::atomic<bool>& log_switch() {
  static std::atomic<bool> on{true};
  return on;
}
}  // namespace detail

// Off: log_info prints nothing (llama.cpp's --log-disable). Process-wide.
inline void set_log_enabled(bool on) {
  detail::log_switch().store(on, std::memory_order_relaxed);
}
inline bool log_enabled() {
  return detail::log_switch().load(std::memory_order_relaxed);
}

// One informational line on stderr (the newline is added).
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (!log_enabled()) return;
  fmt::print(stderr, f, std::forward<Args>(args)...);
  std::fputc('\n', stderr);
}

}  // namespace minfer
