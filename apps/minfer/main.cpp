// Stage 18 (CLI): the process entry. Everything runs in minfer::cli::dispatch
// (dispatch.cpp); here only an exception that escaped it becomes
// "minfer: error: ..." and exit code 1 — never an abort.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"

int main(int argc, char** argv) {
  try {
    return minfer::cli::dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    return minfer::cli::fail(e.what());
  } catch (...) {
    return minfer::cli::fail("unexpected exception");
  }
}
