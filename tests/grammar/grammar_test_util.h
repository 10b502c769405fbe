// Stage 14b tests: reads the data-driven case files of tests/grammar/data.
// Format: "=== name" starts a case; its body runs to the first "--- section" line;
// each section lists lines taken verbatim ("<empty>" is the empty string); lines
// starting with '#' before the first case are comments.
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace minfer::grammar::testing {

struct Case {
  std::string name;
  std::string body;
  std::map<std::string, std::vector<std::string>> sections;
};

inline std::string data_path(const std::string& file) {
  return std::string(MINFER_SOURCE_DIR) + "/tests/grammar/data/" + file;
}

inline std::vector<Case> read_cases(const std::string& file) {
  std::ifstream in(data_path(file));
  std::vector<Case> out;
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.rfind("=== ", 0) == 0) {
      out.push_back(Case{.name = line.substr(4)});
      section.clear();
    } else if (out.empty()) {
      continue;
    } else if (line.rfind("--- ", 0) == 0) {
      section = line.substr(4);
      out.back().sections[section];
    } else if (section.empty()) {
      out.back().body += line + "\n";
    } else {
      out.back().sections[section].push_back(line == "<empty>" ? std::string() : line);
    }
  }
  return out;
}

}  // namespace minfer::grammar::testing
