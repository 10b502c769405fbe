// Stage 3b (convert): general.name / basename / finetune / version / organization /
// size_label from config.json's _name_or_path and the folder name, as gguf-py's
// Metadata.get_model_id_components and apply_metadata_heuristic derive them (the model
// card is not read). "Qwen2.5-0.5B-Instruct" of a 0.5B model: basename "Qwen2.5", size
// label "0.5B", finetune "Instruct"; a size far from the parameter count is a finetune
// ("8b" of a 16M model).
#include <cmath>
#include <regex>
#include <set>
#include <sstream>

#include "convert/metadata.h"

namespace minfer::convert {
namespace {

using nlohmann::json;

struct Components {
  std::optional<std::string> full, org, basename, finetune, version, size_label;
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : "-") + s;
  return out;
}

std::optional<std::string> or_none(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

Components id_components(const std::string& model_id, int64_t total_params) {
  Components c;
  if (model_id.find(' ') != std::string::npos) {
    c.full = model_id;  // a sentence, not a Hugging Face id
    return c;
  }
  std::string full = model_id;
  if (const size_t slash = model_id.find('/'); slash != std::string::npos) {
    c.org = model_id.substr(0, slash);
    full = model_id.substr(slash + 1);
    if (!c.org->empty() && (*c.org)[0] == '.') c.org.reset();  // "./" or "../"
  }
  c.full = full;
  std::vector<std::string> parts;
  std::stringstream ss(full);
  for (std::string p; std::getline(ss, p, '-');) {
    if (!p.empty()) parts.push_back(p);
  }
  const auto icase = std::regex::icase;
  static const std::regex kVersion(R"((v|iter)?\d+([.]\d+)*)", icase);
  static const std::regex kType(R"(i?q\d(_\w)*|b?fp?(16|32))", icase);
  static const std::regex kSize(
      R"((([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl))", icase);
  static const std::regex kFinetune(R"(chat|instruct|vision|lora)", icase);
  std::vector<std::set<std::string>> types(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string part = parts[i];
    if (std::regex_match(part, kVersion)) {
      types[i].insert("version");
    } else if (std::regex_match(part, kType)) {
      types[i].insert("type");
      for (char& ch : parts[i])
        ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    } else if (i > 0 && std::regex_match(part, kSize)) {
      for (char& ch : part) {
        if (ch == '_') ch = '.';
      }
      if (is_digit(part.back())) {  // bloom-7b1 → 7.1b
        part = part.substr(0, part.size() - 2) + "." + part.back() + part[part.size() - 2];
      }
      if (part.size() > 1 && is_digit(part[part.size() - 2]) &&
          std::string_view("kmbt").find(part.back()) != std::string_view::npos) {
        part.back() = static_cast<char>(std::toupper(static_cast<unsigned char>(part.back())));
      }
      if (total_params != 0) {
        // float(part[:-1]) must parse entirely, or the label is kept as it is.
        const std::string num = part.substr(0, part.size() - 1);
        static const std::regex kFloat(R"([+-]?(\d+\.?\d*|\.\d+))");
        if (std::regex_match(num, kFloat)) {
          const auto scale = std::string_view(" KMBT").find(part.back());
          const double label =
              std::stod(num) *
              std::pow(1000.0, scale == std::string_view::npos ? -1.0 : static_cast<double>(scale));
          // Integer divisions as in the Python (`//`), compared with a float label.
          const bool lora = total_params < 0 && label < static_cast<double>((-total_params) / 8);
          const bool far =
              total_params > 0 && std::fabs(label - static_cast<double>(total_params)) >
                                      static_cast<double>(7 * total_params / 8);
          if (lora || far) {  // likely a context length
            types[i].insert("finetune");
            part.back() = static_cast<char>(std::tolower(static_cast<unsigned char>(part.back())));
          }
        }
      }
      if (types[i].empty()) types[i].insert("size_label");
      parts[i] = part;
    } else if (i > 0 && std::regex_match(part, kFinetune)) {
      types[i].insert(total_params < 0 && part == "lora" ? "type" : "finetune");
    }
  }
  // Word sizes ("small") give way to numeric ones.
  bool numeric_size = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (types[i].contains("size_label")) {
      for (char ch : parts[i]) numeric_size = numeric_size || is_digit(ch);
    }
  }
  if (numeric_size) {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!types[i].contains("size_label")) continue;
      bool all_alpha = true;
      for (char ch : parts[i]) all_alpha = all_alpha && is_alpha(ch);
      if (all_alpha) types[i].erase("size_label");
    }
  }
  bool at_start = true;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (at_start && ((types[i].empty() && is_alpha(parts[i][0])) || types[i].contains("version"))) {
      types[i].insert("basename");
    } else {
      at_start = false;
      if (types[i].empty()) types[i].insert("finetune");
    }
  }
  for (size_t i = parts.size(); i-- > 0;) {  // a trailing version is no part of the basename
    if (types[i].contains("basename") && types[i].size() > 1) {
      types[i].erase("basename");
    } else {
      break;
    }
  }
  std::vector<std::string> basename, size, finetune, version;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (types[i].contains("basename")) basename.push_back(parts[i]);
    if (types[i].contains("size_label") &&
        std::find(size.begin(), size.end(), parts[i]) == size.end()) {
      size.push_back(parts[i]);
    }
    if (types[i].contains("finetune")) finetune.push_back(parts[i]);
    if (types[i].contains("version") && !types[i].contains("basename")) version.push_back(parts[i]);
  }
  c.basename = or_none(join(basename));
  c.size_label = or_none(join(size));
  c.finetune = or_none(join(finetune));
  c.version = or_none(join(version));
  if (!c.size_label && !c.finetune && !c.version) c.basename.reset();  // too ambiguous
  return c;
}

void fill(GeneralInfo& g, const Components& c) {
  if (!g.name && c.full) g.name = id_to_title(*c.full);
  if (!g.organization && c.org) g.organization = id_to_title(*c.org);
  if (!g.basename && c.basename) g.basename = c.basename;
  if (!g.finetune && c.finetune) g.finetune = c.finetune;
  if (!g.version && c.version) g.version = c.version;
  if (!g.size_label && c.size_label) g.size_label = c.size_label;
}

}  // namespace

GeneralInfo general_info(const std::string& dir_name, const json& config, int64_t total_params) {
  GeneralInfo g;
  if (config.contains("_name_or_path") && config["_name_or_path"].is_string()) {
    const std::string id = config["_name_or_path"].get<std::string>();
    if (std::count(id.begin(), id.end(), '/') <= 1) fill(g, id_components(id, total_params));
  }
  fill(g, id_components(dir_name, total_params));
  if (!g.name) g.name = dir_name;
  if (!g.size_label && total_params > 0)
    g.size_label = size_label(static_cast<uint64_t>(total_params));
  return g;
}

}  // namespace minfer::convert
