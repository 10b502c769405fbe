// Stage 1 (core): the error channel for expected failures (files, user input, HTTP).
// Invariant: a Result holds exactly one of a value or an Error; reading the wrong
// one is a broken invariant and fails MINFER_CHECK in every build type.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace minfer {

// An expected failure: a human-readable message that names what was wrong and where
// (field, byte offset, flag). Callers add context with `context()` as it propagates.
struct Error {
  std::string message;

  Error context(const std::string& what) const { return Error{what + ": " + message}; }
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    MINFER_CHECK(ok(), "Result::value() on an error: %s", std::get<1>(v_).message.c_str());
    return std::get<0>(v_);
  }
  const T& value() const& {
    MINFER_CHECK(ok(), "Result::value() on an error: %s", std::get<1>(v_).message.c_str());
    return std::get<0>(v_);
  }
  T&& value() && {
    MINFER_CHECK(ok(), "Result::value() on an error: %s", std::get<1>(v_).message.c_str());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    MINFER_CHECK(!ok(), "Result::error() on a value");
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
struct Ok {};
using Status = Result<Ok>;

inline Error make_error(std::string message) {
  return Error{std::move(message)};
}

}  // namespace minfer

// Propagate an error from an expression returning Result<T>; bind the value otherwise.
#define MINFER_CONCAT_INNER(a, b) a##b
#define MINFER_CONCAT(a, b) MINFER_CONCAT_INNER(a, b)
#define MINFER_TRY_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                     \
  if (!tmp.ok()) return tmp.error();     \
  decl = std::move(tmp).value()
#define MINFER_TRY(decl, expr) MINFER_TRY_IMPL(MINFER_CONCAT(minfer_try_, __LINE__), decl, expr)
#define MINFER_TRY_STATUS(expr)                      \
  do {                                               \
    auto minfer_st_ = (expr);                        \
    if (!minfer_st_.ok()) return minfer_st_.error(); \
  } while (0)
