// Stage 18 (CLI): hf: downloads into the model cache (see model_fetch.h).
#include "model_fetch.h"

#include <fmt/format.h>
#include <httplib.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "model_path.h"

namespace minfer::cli {
namespace {

namespace fs = std::filesystem;

struct RemoteFile {
  std::string path;    // in the repository
  uint64_t size = 0;   // bytes
  std::string sha256;  // lfs.oid; empty when the listing has none
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string cache_root() {
  if (const char* c = std::getenv("MINFER_CACHE"); c != nullptr && *c != '\0') return c;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/minfer";
}

// Splits "scheme://host[:port][/base]" into the client's origin and a path prefix.
std::pair<std::string, std::string> split_endpoint(const std::string& endpoint) {
  const size_t scheme = endpoint.find("://");
  const size_t slash = endpoint.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (slash == std::string::npos) return {endpoint, ""};
  return {endpoint.substr(0, slash), endpoint.substr(slash)};
}

std::unique_ptr<httplib::Client> client_for(const std::string& origin) {
  auto c = std::make_unique<httplib::Client>(origin);
  c->set_follow_location(true);
  c->set_connection_timeout(10);
  c->set_read_timeout(60);
  if (const char* token = std::getenv("HF_TOKEN"); token != nullptr && *token != '\0') {
    c->set_bearer_token_auth(token);
  }
  return c;
}

Result<std::vector<RemoteFile>> list_files(const std::string& endpoint, const std::string& repo) {
  const auto [origin, base] = split_endpoint(endpoint);
  auto c = client_for(origin);
  const std::string path = base + "/api/models/" + repo + "/tree/main";
  auto res = c->Get(path);
  if (!res) {
    return make_error(fmt::format("hf:{}: cannot reach {} ({})", repo, endpoint,
                                  httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    return make_error(fmt::format("hf:{}: {}{} answered HTTP {}", repo, origin, path, res->status));
  }
  std::vector<RemoteFile> out;
  try {
    const auto j = nlohmann::json::parse(res->body);
    for (const auto& e : j) {
      if (e.value("type", "file") != "file") continue;
      RemoteFile f;
      f.path = e.at("path").get<std::string>();
      f.size = e.value("size", uint64_t{0});
      if (e.contains("lfs") && e["lfs"].is_object()) {
        f.sha256 = e["lfs"].value("oid", "");
        f.size = e["lfs"].value("size", f.size);
      }
      out.push_back(std::move(f));
    }
  } catch (const std::exception& e) {
    return make_error(fmt::format("hf:{}: the file list is not valid JSON ({})", repo, e.what()));
  }
  return out;
}

// The GGUF files of one model: QUANT's file (all parts when split), or the only model.
Result<std::vector<RemoteFile>> choose(const std::string& repo, const std::string& quant,
                                       const std::vector<RemoteFile>& files) {
  static const std::regex kPart(R"(-(\d{5})-of-(\d{5})\.gguf$)");
  std::vector<RemoteFile> ggufs;
  for (const auto& f : files) {
    if (lower(f.path).ends_with(".gguf")) ggufs.push_back(f);
  }
  if (ggufs.empty()) return make_error("hf:" + repo + ": the repository has no .gguf file");
  // Group split parts under their first part's name.
  auto model_key = [](const std::string& p) { return std::regex_replace(p, kPart, ".gguf"); };
  std::vector<std::string> models;
  for (const auto& f : ggufs) {
    const std::string k = model_key(f.path);
    if (std::find(models.begin(), models.end(), k) == models.end()) models.push_back(k);
  }
  std::vector<std::string> picked;
  for (const auto& m : models) {
    if (quant.empty() ||
        lower(fs::path(m).filename().string()).find(lower(quant)) != std::string::npos) {
      picked.push_back(m);
    }
  }
  std::string choices;
  for (const auto& m : models) choices += "\n  " + m;
  if (picked.empty()) {
    return make_error(fmt::format("hf:{}: no GGUF file matches '{}'; the repository has:{}", repo,
                                  quant, choices));
  }
  if (picked.size() > 1) {
    return make_error(fmt::format("hf:{}{}: {} GGUF files match; name one with hf:{}:QUANT:{}",
                                  repo, quant.empty() ? "" : ":" + quant, picked.size(), repo,
                                  choices));
  }
  std::vector<RemoteFile> out;
  for (const auto& f : ggufs) {
    if (model_key(f.path) == picked.front()) out.push_back(f);
  }
  std::sort(out.begin(), out.end(),
            [](const RemoteFile& a, const RemoteFile& b) { return a.path < b.path; });
  return out;
}

// Downloads one file into the cache (resuming dl/NAME.part), checks size and sha256,
// renames it into the models folder.
Status download(const std::string& endpoint, const std::string& repo, const RemoteFile& f,
                const std::string& dest, bool quiet) {
  const auto [origin, base] = split_endpoint(endpoint);
  const std::string dl_dir = cache_root() + "/dl";
  std::error_code ec;
  fs::create_directories(dl_dir, ec);
  if (ec) return make_error("cannot create '" + dl_dir + "': " + ec.message());
  fs::create_directories(fs::path(dest).parent_path(), ec);
  if (ec) return make_error("cannot create the model cache: " + ec.message());
  const std::string part = dl_dir + "/" + fs::path(f.path).filename().string() + ".part";
  uint64_t have = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
  if (have > f.size && f.size > 0) {
    fs::remove(part, ec);
    have = 0;
  }
  std::FILE* out = std::fopen(part.c_str(), have > 0 ? "ab" : "wb");
  if (out == nullptr) return make_error("cannot create '" + part + "': " + std::strerror(errno));
  auto c = client_for(origin);
  httplib::Headers headers;
  if (have > 0) headers.emplace("Range", fmt::format("bytes={}-", have));
  int status = 0;
  bool restarted = false;
  std::string write_error;
  uint64_t got = have;
  const std::string path = base + "/" + repo + "/resolve/main/" + f.path;
  auto res = c->Get(
      path, headers,
      [&](const httplib::Response& r) {
        status = r.status;
        if (r.status == 200 && have > 0) {  // the server ignored the range: start over
          restarted = true;
          got = 0;
          if (std::freopen(part.c_str(), "wb", out) == nullptr) {
            write_error = std::strerror(errno);
            return false;
          }
        }
        return r.status == 200 || r.status == 206;
      },
      [&](const char* data, size_t len) {
        if (std::fwrite(data, 1, len, out) != len) {
          write_error = std::strerror(errno);
          return false;
        }
        got += len;
        return true;
      });
  const bool flushed = out != nullptr && std::fflush(out) == 0;
  if (!flushed && write_error.empty()) write_error = std::strerror(errno);
  if (out != nullptr) std::fclose(out);
  if (!write_error.empty()) {
    fs::remove(part, ec);  // a failed write (a full disk) leaves nothing behind
    return make_error(fmt::format("hf:{}: writing {} failed: {}", repo, part, write_error));
  }
  if (status != 0 && status != 200 && status != 206) {
    return make_error(fmt::format("hf:{}: {}{} answered HTTP {}", repo, origin, path, status));
  }
  if (!res && got != f.size) {
    return make_error(fmt::format(
        "hf:{}: the download of {} stopped after {} of {} bytes ({}); run again to resume", repo,
        f.path, got, f.size, httplib::to_string(res.error())));
  }
  (void)restarted;
  const uint64_t size = fs::file_size(part, ec);
  if (f.size > 0 && size != f.size) {
    if (size > f.size) fs::remove(part, ec);
    return make_error(fmt::format("hf:{}: {} has {} bytes, the listing says {}{}", repo, f.path,
                                  size, f.size,
                                  size < f.size ? " (truncated; run again to resume)" : ""));
  }
  if (!f.sha256.empty()) {
    MINFER_TRY(std::string sha, file_sha256(part));
    if (sha != lower(f.sha256)) {
      fs::remove(part, ec);
      return make_error(fmt::format("hf:{}: {} has sha256 {}, the listing says {}; removed", repo,
                                    f.path, sha, f.sha256));
    }
  }
  fs::rename(part, dest, ec);
  if (ec) {
    // Across file systems: copy to a temporary name beside dest, then rename.
    const std::string tmp = dest + ".tmp";
    fs::copy_file(part, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tmp, dest, ec);
    if (ec) {
      fs::remove(tmp, ec);
      return make_error("cannot move the download into " + dest + ": " + ec.message());
    }
    fs::remove(part, ec);
  }
  if (!quiet)
    std::fprintf(stderr, "hf:%s: %s (%llu bytes) -> %s\n", repo.c_str(), f.path.c_str(),
                 static_cast<unsigned long long>(size), dest.c_str());
  return Ok{};
}

}  // namespace

std::string hf_endpoint() {
  for (const char* var : {"MINFER_HF_ENDPOINT", "HF_ENDPOINT"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      std::string e = v;
      while (!e.empty() && e.back() == '/') e.pop_back();
      return e;
    }
  }
  return "https://huggingface.co";
}

Result<std::string> file_sha256(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return make_error("cannot open '" + path + "': " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<unsigned char> buf(1 << 20);
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0)
    EVP_DigestUpdate(ctx.get(), buf.data(), n);
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) return make_error("cannot read '" + path + "'");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

Result<std::string> fetch_hf(const std::string& ref, bool quiet) {
  std::string spec = ref.substr(3);  // after "hf:"
  std::string repo = spec, quant;
  if (const size_t colon = spec.find(':'); colon != std::string::npos) {
    repo = spec.substr(0, colon);
    quant = spec.substr(colon + 1);
  }
  static const std::regex kRepo(R"([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)");
  if (!std::regex_match(repo, kRepo) || repo.find("..") != std::string::npos) {
    return make_error("'" + ref + "' is not hf:OWNER/REPO[:QUANT]");
  }
  const std::string endpoint = hf_endpoint();
  MINFER_TRY(std::vector<RemoteFile> files, list_files(endpoint, repo));
  MINFER_TRY(std::vector<RemoteFile> chosen, choose(repo, quant, files));
  const std::string dir = model_cache_dir();
  std::string first;
  for (const auto& f : chosen) {
    const std::string dest = dir + "/" + fs::path(f.path).filename().string();
    if (first.empty()) first = dest;
    std::error_code ec;
    if (fs::is_regular_file(dest, ec) && (f.size == 0 || fs::file_size(dest, ec) == f.size)) {
      continue;  // cached (checked when it was downloaded)
    }
    MINFER_TRY_STATUS(download(endpoint, repo, f, dest, quiet));
  }
  return first;
}

}  // namespace minfer::cli
