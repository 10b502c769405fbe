// Fuzz target (stage 18): the whole command line through minfer::cli::dispatch, as
// main() passes it, with arguments taken from the input.
// Invariants under test: any argv is either a run or "minfer: error: ..." with exit
// code 1 — no crash, no exception escaping dispatch (main's catch-all is a last
// resort, not the error path), no exit() behind the caller's back, no hang.
// Input: arguments separated by NUL bytes. Sandbox: a fresh empty working directory
// and model cache, stdin at /dev/null, and '/' in arguments replaced by '_' so that
// every path the run may open or write stays inside that directory; no model exists
// there, so a run ends at the model-loading step at the latest.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char dir[] = "/tmp/minfer-fuzz-cli-XXXXXX";
  if (mkdtemp(dir) == nullptr || chdir(dir) != 0) {
    std::perror("fuzz_cli_args: temp dir");
    std::abort();
  }
  setenv("MINFER_MODEL_DIR", dir, 1);
  setenv("MINFER_CACHE", dir, 1);
  if (std::freopen("/dev/null", "r", stdin) == nullptr) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0') {
      args.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c == '/' ? '_' : c);
    }
  }
  if (!cur.empty()) args.push_back(std::move(cur));
  if (args.size() > 64) return 0;  // long command lines add nothing the parser has not seen
  // An exactly sized copy (push_back leaves spare capacity): a read one past the last
  // argument then lands outside the allocation, where ASan sees it.
  const std::vector<std::string> argv(args.begin(), args.end());
  const int rc = minfer::cli::dispatch(argv);
  if (rc != 0 && rc != 1) {
    std::fprintf(stderr, "fuzz_cli_args: exit code %d (only 0 and 1 are documented)\n", rc);
    std::abort();
  }
  std::fflush(stdout);
  return 0;
}
