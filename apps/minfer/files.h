// Stage 18 (CLI): every file a command opens goes through these helpers, so a
// directory, a FIFO or an unwritable path is one clear error
// ("'X' is a directory") before any work, never an empty read, a hang or a
// failure at the end of a long run.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace minfer::cli {

// The bytes of a text input (prompt file, messages, templates, tokenize --file).
// Errors: missing, a directory ("'X' is a directory"), unreadable. A FIFO or a
// character device is read to its end (`-f <(cmd)` and /dev/stdin are pipes).
Result<std::string> read_input_file(const std::string& path);

// A model path: must exist and be a regular file — a FIFO or a device would block
// or map nothing, so it is refused before it is opened.
Status check_model_file(const std::string& path);

// An output path (--session, --dump-json, --dump-logits, --dump-graph): an existing
// path must be a regular file we may write; otherwise its folder must exist and be
// writable (the session file and the model tools' outputs are written to a temporary
// file renamed over the target; the --dump-* files are written in place).
Status check_writable(const std::string& path, const std::string& flag);

// The output of a tool that writes a new file from inputs (quantize, split, merge,
// convert): never one of its own inputs — the same inode, through symbolic or hard
// links too, refused even with --force — and an existing file only with `force`
// (llama.cpp's tools overwrite silently; losing a model to a swapped argument is worse
// than typing --force). Then check_writable(path, flag).
Status check_new_output(const std::string& path, const std::vector<std::string>& inputs, bool force,
                        const std::string& flag);

}  // namespace minfer::cli
