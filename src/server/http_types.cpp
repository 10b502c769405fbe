// Stage 17 (HTTP): the request and response types (http_types.h).
#include "server/http_types.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace minfer::server::http {

bool CaseLess::operator()(std::string_view a, std::string_view b) const {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) <
           std::tolower(static_cast<unsigned char>(y));
  });
}

std::string Request::header(std::string_view name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

bool Request::has_header(std::string_view name) const {
  return headers.find(name) != headers.end();
}

std::string Request::param(std::string_view name) const {
  auto it = params.find(std::string(name));
  return it == params.end() ? std::string() : it->second;
}

bool Request::has_param(std::string_view name) const {
  return params.find(std::string(name)) != params.end();
}

uint64_t Request::content_length() const {
  const std::string v = header("Content-Length");
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  return ec == std::errc() && end == v.data() + v.size() ? n : 0;
}

bool Request::chunked() const {
  return ::strcasecmp(header("Transfer-Encoding").c_str(), "chunked") == 0;
}

void Response::set_header(const std::string& name, std::string value) {
  headers.erase(name);
  headers.emplace(name, std::move(value));
}

std::string Response::header(std::string_view name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

void Response::set_content(std::string content, std::string type) {
  body = std::move(content);
  content_type = std::move(type);
}

void Response::set_chunked(std::string type, StreamProvider p, StreamRelease r) {
  content_type = std::move(type);
  provider = std::move(p);
  release = std::move(r);
}

std::string percent_decode(std::string_view s, bool plus_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else if (c == '+' && plus_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Params parse_query(std::string_view query) {
  Params out;
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t end = query.find('&', pos);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view item = query.substr(pos, end - pos);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      out.emplace(
          percent_decode(item.substr(0, eq), true),
          eq == std::string_view::npos ? std::string() : percent_decode(item.substr(eq + 1), true));
    }
    pos = end + 1;
  }
  return out;
}

}  // namespace minfer::server::http
