// Stage 18 (CLI): model argument resolution.
#include "model_path.h"

#include <cstdlib>
#include <filesystem>

#include "model_fetch.h"

namespace minfer::cli {

namespace fs = std::filesystem;

std::string model_cache_dir() {
  if (const char* d = std::getenv("MINFER_MODEL_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* c = std::getenv("MINFER_CACHE"); c != nullptr && *c != '\0') {
    return std::string(c) + "/models";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/minfer/models";
}

Result<std::string> resolve_model_path(const std::string& arg) {
  const std::string dir = model_cache_dir();
  if (arg.empty()) {
    std::string p = dir + "/" + kDefaultModelFile;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
    return make_error("no model given and the default model is not in " + dir +
                      " (run scripts/setup.sh to fetch it)");
  }
  std::error_code ec;
  if (arg.starts_with("hf:") && !fs::exists(arg, ec)) return fetch_hf(arg);
  if (arg.starts_with("pypi:") && !fs::exists(arg, ec)) return fetch_pypi(arg);
  if (fs::is_directory(arg, ec)) {
    std::string list;
    for (const auto& e : fs::directory_iterator(arg, ec)) {
      if (e.path().extension() == ".gguf") list += "\n  " + e.path().string();
    }
    return make_error("'" + arg + "' is a directory" +
                      (list.empty() ? std::string(" with no .gguf files")
                                    : std::string("; GGUF files in it:") + list));
  }
  if (fs::exists(arg, ec)) return arg;
  const bool looks_like_path = arg.find('/') != std::string::npos;
  if (!looks_like_path) {
    for (const std::string& cand : {dir + "/" + arg, dir + "/" + arg + ".gguf"}) {
      if (fs::is_regular_file(cand, ec)) return cand;
    }
  }
  return make_error("model '" + arg + "' not found (not a file, not in " + dir + ")");
}

}  // namespace minfer::cli
