// Stage 1 (core): diagnostics go to stderr, never stdout (stdout carries only
// generated text and command output).
#pragma once

#include <fmt/core.h>

#include <cstdio>

namespace minfer {

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, f, std::forward<Args>(args)...);
  std::fputc('\n', stderr);
}

}  // namespace minfer
