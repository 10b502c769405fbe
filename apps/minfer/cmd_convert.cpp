// Stage 18 (CLI): `minfer convert HF_DIR OUT.gguf [--outtype f32|f16|bf16|q8_0|auto]` — a
// Hugging Face checkpoint folder to GGUF, the bytes llama.cpp's convert_hf_to_gguf.py
// writes (src/convert). One progress line per tensor on stderr; OUT is written as
// OUT.tmp and renamed when complete, so an error leaves no OUT behind.
#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "convert/convert.h"
#include "files.h"

namespace minfer::cli {

int run_convert(const std::vector<std::string>& args) {
  ArgParser p(
      "minfer convert HF_DIR OUT.gguf [--outtype f32|f16|bf16|q8_0|auto]\n"
      "a Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json) as GGUF,\n"
      "the bytes llama.cpp's convert_hf_to_gguf.py writes; LlamaForCausalLM,\n"
      "Qwen2ForCausalLM, Qwen3ForCausalLM, BertModel, BertForSequenceClassification");
  std::string outtype = "auto";
  p.string_opt("--outtype", "TYPE",
               "f32, f16, bf16, q8_0, or auto (the default: bf16 or f16 as the checkpoint's\n"
               "first matrix is stored, f16 for f32 checkpoints); norms and biases stay f32",
               outtype);
  bool force = false;
  bool keep_pooler = false;
  p.flag("--keep-pooler",
         "BERT: write the pooler (dense + tanh before a classifier) as cls.weight/cls.bias,\n"
         "which llama.cpp's converter drops; a cross-encoder then scores as transformers does",
         [&] { keep_pooler = true; });
  p.flag("--force", "replace an existing OUT.gguf (never a file of HF_DIR)", [&] { force = true; });
  ArgParser::Parsed parsed;
  if (auto done = parse_or_help(p, args, parsed)) return *done;
  if (parsed.positionals.size() != 2) {
    return fail(fmt::format("convert: expected HF_DIR OUT.gguf, got {} argument(s)",
                            parsed.positionals.size()));
  }
  auto ot = convert::parse_outtype(outtype);
  if (!ot) return fail("convert: " + ot.error().message);
  const std::string& out = parsed.positionals[1];
  // The checkpoint's own files are the inputs OUT must not be.
  std::vector<std::string> inputs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parsed.positionals[0], ec)) {
    inputs.push_back(e.path().string());
  }
  if (auto st = check_new_output(out, inputs, force, "OUT.gguf"); !st.ok()) {
    return fail("convert: " + st.error().message);
  }
  convert::ConvertOptions opts{
      .hf_dir = parsed.positionals[0], .out_path = out, .outtype = *ot, .keep_pooler = keep_pooler};
  opts.on_tensor = [](size_t i, size_t n, const convert::PlannedTensor& t) {
    std::string shape;
    for (uint64_t d : t.dims) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    fmt::print(stderr, "[{:4}/{:4}] {:<32} {:>5} -> {:<5} [{}]\n", i, n, t.name, t.src->dtype_name,
               dtype_name(t.type), shape);
  };
  auto sum = convert::convert_checkpoint(opts);
  if (!sum) return fail("convert: " + sum.error().message);
  fmt::print(stderr, "convert: wrote {} ({} tensors, {}, {} bytes)\n", out, sum->n_tensors,
             convert::outtype_name(sum->outtype), sum->n_bytes);
  return 0;
}

}  // namespace minfer::cli
