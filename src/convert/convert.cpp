// Stage 3b (convert): the whole conversion — open and validate the checkpoint, plan the
// tensors, build the metadata, then stream header and tensor data through
// gguf::StreamWriter (temporary file, renamed when complete).
#include "convert/convert.h"

#include <nlohmann/json.hpp>

#include "convert/metadata.h"
#include "gguf/gguf.h"

namespace minfer::convert {

Result<OutType> parse_outtype(std::string_view s) {
  if (s == "f32") return OutType::kF32;
  if (s == "f16") return OutType::kF16;
  if (s == "bf16") return OutType::kBF16;
  if (s == "q8_0") return OutType::kQ8_0;
  if (s == "auto") return OutType::kAuto;
  return make_error("--outtype: '" + std::string(s) + "' is not one of f32, f16, bf16, q8_0, auto");
}

std::string_view outtype_name(OutType t) {
  switch (t) {
    case OutType::kF32:
      return "f32";
    case OutType::kF16:
      return "f16";
    case OutType::kBF16:
      return "bf16";
    case OutType::kQ8_0:
      return "q8_0";
    case OutType::kAuto:
      break;
  }
  return "auto";
}

namespace {

Result<ConvertSummary> convert_unchecked(const ConvertOptions& opts) {
  MINFER_TRY(const Checkpoint ck, Checkpoint::open(opts.hf_dir, opts.keep_pooler));
  ConvertSummary sum;
  sum.outtype = resolve_outtype(opts.outtype, ck);
  MINFER_TRY(const std::vector<PlannedTensor> plan, plan_tensors(ck, sum.outtype));
  MINFER_TRY(const std::vector<gguf::KeyValue> kvs, build_metadata(ck, sum.outtype, plan));

  std::vector<gguf::StreamWriter::TensorDecl> decls;
  decls.reserve(plan.size());
  for (const PlannedTensor& t : plan) decls.push_back({t.name, t.type, t.dims});
  MINFER_TRY(auto w, gguf::StreamWriter::create(opts.out_path, kvs, decls));
  std::vector<float> scratch;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < plan.size(); ++i) {
    MINFER_TRY_STATUS(encode_tensor(plan[i], scratch, bytes));
    MINFER_TRY_STATUS(w->write(bytes));
    if (opts.on_tensor) opts.on_tensor(i + 1, plan.size(), plan[i]);
  }
  sum.n_bytes = w->bytes_written();
  MINFER_TRY_STATUS(w->finish());
  sum.n_tensors = plan.size();
  return sum;
}

}  // namespace

Result<ConvertSummary> convert_checkpoint(const ConvertOptions& opts) {
  // The JSON inputs are read with type checks where a wrong type is plausible; a value
  // of an unexpected type anywhere else surfaces as nlohmann's exception, which is an
  // input error like the others (the StreamWriter, if any, has removed its file).
  try {
    return convert_unchecked(opts);
  } catch (const nlohmann::json::exception& e) {
    return make_error(std::string("a JSON value of an unexpected type: ") + e.what());
  }
}

}  // namespace minfer::convert
