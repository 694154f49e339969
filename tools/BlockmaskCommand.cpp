// `tilejit blockmask FILE.tj --seq-q N --seq-kv M [--batch B] [--heads H] [--block-q 128]
//  [--block-kv 64] [--bind NAME=FILE.bin]... [--param NAME=VALUE]... [--refine] [--threads T]
//  [--json]`
//
// Classifies the tiles of an attention program's mask on the CPU (runtime/MaskAnalysis.h) and
// prints the tile size, the counts of empty / partial / full tiles, the number of runs, the
// bytes of the block mask and the time taken; --json prints one object with the keys block_q,
// block_kv, q_tiles, kv_tiles, empty, partial, full, runs, bytes, seconds.
//
// Buffer files are raw little-endian arrays of the buffer's declared element type, row-major.
// Their shape comes from the dimension names: B = --batch, H = --heads, Sq = --seq-q,
// Skv = --seq-kv, S = the sequence length when --seq-q equals --seq-kv; at most one other
// dimension (or S when the lengths differ) is inferred from the file size.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "dsl/TextForm.h"
#include "runtime/MaskAnalysis.h"
#include "tools/CommandLine.h"

namespace tilejit::cli {

namespace {

std::pair<std::string, std::string> split_assignment(const std::string& s, const char* option) {
  size_t eq = s.find('=');
  TILEJIT_USER_CHECK(eq != std::string::npos && eq > 0, "--{} expects NAME=VALUE, got '{}'", option,
                     s);
  return {s.substr(0, eq), s.substr(eq + 1)};
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TILEJIT_USER_CHECK(in.good(), "cannot read buffer file '{}'", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The shape of a buffer bound from a file of `bytes` bytes.
std::vector<int64_t> infer_shape(const BufferDecl& decl, size_t bytes,
                                 const std::map<std::string, int64_t>& known,
                                 const std::string& path) {
  size_t esize = elem_size(decl.elem);
  TILEJIT_USER_CHECK(bytes % esize == 0, "buffer file '{}' ({} bytes) is not a whole number of {}",
                     path, bytes, elem_type_name(decl.elem));
  int64_t elems = static_cast<int64_t>(bytes / esize), product = 1;
  std::vector<int64_t> shape;
  int unknown = -1;
  for (size_t i = 0; i < decl.dims.size(); ++i) {
    auto it = known.find(decl.dims[i]);
    if (it == known.end()) {
      TILEJIT_USER_CHECK(unknown < 0, "buffer '{}': cannot infer both dims '{}' and '{}' from '{}'",
                         decl.name, decl.dims[unknown], decl.dims[i], path);
      unknown = static_cast<int>(i);
      shape.push_back(0);
    } else {
      shape.push_back(it->second);
      product *= it->second;
    }
  }
  if (unknown >= 0) {
    TILEJIT_USER_CHECK(product > 0 && elems % product == 0,
                       "buffer '{}': {} elements in '{}' do not divide into the known dims",
                       decl.name, elems, path);
    shape[unknown] = elems / product;
    product *= shape[unknown];
  }
  TILEJIT_USER_CHECK(product == elems, "buffer '{}': '{}' holds {} elements, the shape needs {}",
                     decl.name, path, elems, product);
  return shape;
}

DType dtype_for(ElemType e) {
  switch (e) {
    case ElemType::I32: return DType::I32;
    case ElemType::F32: return DType::F32;
    case ElemType::BF16: return DType::BF16;
    case ElemType::F16: return DType::F16;
  }
  return DType::I32;
}

}  // namespace

int run_blockmask(const CommandLine& cmd) {
  TILEJIT_USER_CHECK(cmd.positional.size() == 1, "blockmask expects one program file");
  ParsedProgram parsed = load_program(cmd.positional[0]);
  const AttentionProgram* prog = std::get_if<AttentionProgram>(&parsed);
  TILEJIT_USER_CHECK(prog != nullptr, "'{}' is not an attention program", cmd.positional[0]);
  TILEJIT_USER_CHECK(cmd.has("seq-q") && cmd.has("seq-kv"), "blockmask needs --seq-q and --seq-kv");

  BlockMaskShape shape;
  shape.seq_q = static_cast<int>(cmd.get_int("seq-q", 0));
  shape.seq_kv = static_cast<int>(cmd.get_int("seq-kv", 0));
  shape.batch = static_cast<int>(cmd.get_int("batch", 1));
  shape.heads = static_cast<int>(cmd.get_int("heads", 1));
  shape.block_q = static_cast<int>(cmd.get_int("block-q", shape.block_q));
  shape.block_kv = static_cast<int>(cmd.get_int("block-kv", shape.block_kv));
  TILEJIT_USER_CHECK(shape.seq_q >= 0 && shape.seq_kv >= 0 && shape.batch >= 1 &&
                         shape.heads >= 1 && shape.block_q >= 1 && shape.block_kv >= 1,
                     "blockmask: lengths must be >= 0, batch, heads and blocks >= 1");

  std::map<std::string, int64_t> known = {
      {"B", shape.batch}, {"H", shape.heads}, {"Sq", shape.seq_q}, {"Skv", shape.seq_kv}};
  if (shape.seq_q == shape.seq_kv) known["S"] = shape.seq_q;

  Bindings bind;
  std::vector<std::vector<unsigned char>> storage;
  storage.reserve(cmd.all("bind").size());
  for (const std::string& b : cmd.all("bind")) {
    auto [name, path] = split_assignment(b, "bind");
    const BufferDecl* decl = prog->find_buffer(name);
    TILEJIT_USER_CHECK(decl != nullptr, "program '{}' has no buffer '{}'", prog->name, name);
    storage.push_back(read_file(path));
    std::vector<int64_t> shp = infer_shape(*decl, storage.back().size(), known, path);
    bind.buffer(name, TensorView::contiguous(storage.back().data(), dtype_for(decl->elem), shp,
                                             TensorView::Where::Host, name));
  }
  for (const std::string& p : cmd.all("param")) {
    auto [name, value] = split_assignment(p, "param");
    const ParamDecl* decl = prog->find_param(name);
    TILEJIT_USER_CHECK(decl != nullptr, "program '{}' has no param '{}'", prog->name, name);
    try {
      if (decl->type == Type::I32)
        bind.param(name, static_cast<int32_t>(std::stol(value)));
      else
        bind.param(name, std::stof(value));
    } catch (const std::logic_error&) {
      user_error("--param {}: '{}' is not a number", name, value);
    }
  }

  LoweredAttention lowered = lower(*prog);
  AnalysisOptions options{.refine_partial = cmd.has("refine"),
                          .threads = static_cast<int>(cmd.get_int("threads", 0))};
  auto t0 = std::chrono::steady_clock::now();
  BlockMask mask = analyse_block_mask(lowered, bind, shape, options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BlockMask::Counts n = mask.counts();
  if (cmd.has("json")) {
    fmt::print(
        "{{\"block_q\": {}, \"block_kv\": {}, \"q_tiles\": {}, \"kv_tiles\": {}, \"empty\": {}, "
        "\"partial\": {}, \"full\": {}, \"runs\": {}, \"bytes\": {}, \"seconds\": {:.6f}}}\n",
        shape.block_q, shape.block_kv, mask.q_tiles(), mask.kv_tiles(), n.empty, n.partial, n.full,
        mask.runs().size(), mask.bytes(), seconds);
    return 0;
  }
  fmt::print("{}: {} x {} tiles of {} x {} (batch {}, heads {} after broadcast)\n", prog->name,
             mask.q_tiles(), mask.kv_tiles(), shape.block_q, shape.block_kv, mask.shape().batch,
             mask.shape().heads);
  fmt::print("  empty {}  partial {}  full {}\n", n.empty, n.partial, n.full);
  fmt::print("  runs {} (transposed {}), {} bytes, {:.3f} ms\n", mask.runs().size(),
             mask.t_runs().size(), mask.bytes(), seconds * 1e3);
  return 0;
}

}  // namespace tilejit::cli
