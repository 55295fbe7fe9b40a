// The PTX instructions the kernels' inline asm uses, interpreted from the asm text itself: mma.sync
// m16n8k16 (bf16 in, f32 accumulate), ldmatrix m8n8 (.trans or not), cp.async with its commit and
// wait groups; and the warp shuffles. Fragment layouts as the PTX ISA defines them ("Matrix
// Fragments for mma.m16n8k16 with floating point type"; ldmatrix's "Figure 104"), lane = 4 g + t:
//   A (16 x 16): register r holds rows g + 8 (r % 2), columns 2 t + 8 (r / 2) and the next one
//   B (16 x 8):  register r holds k rows 2 t + 8 r and the next one, column n = g
//   C (16 x 8):  c[e] is row g + 8 (e / 2), column 2 t + e % 2
//   ldmatrix:    lanes 8 m .. 8 m + 7 give the row addresses of matrix m, whose elements land in
//                register m: (row g, columns 2 t, 2 t + 1), or with .trans (rows 2 t, 2 t + 1, column g)
// The lower-numbered element of a pair is in a register's low 16 bits.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tests/cuda_emul/emulator_internal.h"

namespace tandem_emul {

namespace {

float bf16_to_float(uint16_t bits) {
  const uint32_t f = uint32_t{bits} << 16;
  float v;
  std::memcpy(&v, &f, 4);
  return v;
}
float lo_half(uint32_t w) { return bf16_to_float(static_cast<uint16_t>(w & 0xffffu)); }
float hi_half(uint32_t w) { return bf16_to_float(static_cast<uint16_t>(w >> 16)); }

uint32_t float_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
float bits_float(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// ---- parsing ---------------------------------------------------------------------------------------

enum class Kind { kMma, kLdmatrix, kCpAsync, kCommit, kWaitGroup, kWaitAll };

// One operand of the instruction: a register %n, an immediate, or an address [%n], or a
// brace-enclosed vector of registers.
struct Item {
  enum Type { kReg, kImm, kAddr } type;
  int64_t value;  // operand number, or the immediate
};

struct Instruction {
  Kind kind;
  std::string opcode;
  std::vector<std::vector<Item>> operands;
  int matrices = 0;    // ldmatrix .x1 / .x2 / .x4
  bool trans = false;  // ldmatrix .trans
};

[[noreturn]] void bad_asm(const std::string& text, const char* why) { fatal(why, text.c_str()); }

Item parse_item(const std::string& text, std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.empty()) bad_asm(text, "an empty PTX operand");
  Item item{Item::kImm, 0};
  if (s.front() == '[') {
    if (s.back() != ']') bad_asm(text, "an address operand without its closing bracket");
    s = s.substr(1, s.size() - 2);
    item.type = Item::kAddr;
  } else if (s.front() == '%') {
    item.type = Item::kReg;
  }
  if (s.front() == '%') s.remove_prefix(1);
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) {
    bad_asm(text, "a PTX operand that is not %n, [%n] or a decimal immediate");
  }
  item.value = std::stoll(std::string(s));
  return item;
}

Instruction parse(const char* asm_text) {
  std::string text(asm_text);
  for (char& c : text) c = (c == '\n' || c == '\t') ? ' ' : c;
  const size_t semi = text.find(';');
  if (semi == std::string::npos || text.find_first_not_of(' ', semi + 1) != std::string::npos) {
    bad_asm(text, "an asm statement that is not exactly one PTX instruction");
  }
  text.resize(semi);
  const size_t start = text.find_first_not_of(' ');
  const size_t space = text.find(' ', start);
  Instruction ins;
  ins.opcode = text.substr(start, space == std::string::npos ? std::string::npos : space - start);
  const std::string rest = space == std::string::npos ? "" : text.substr(space);
  // Operands: split at the commas outside braces.
  int depth = 0;
  std::string current;
  std::vector<std::string> raw;
  for (char c : rest) {
    if (c == '{') ++depth;
    if (c == '}') --depth;
    if (c == ',' && depth == 0) {
      raw.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (current.find_first_not_of(' ') != std::string::npos) raw.push_back(current);
  for (const std::string& r : raw) {
    std::string_view s(r);
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    std::vector<Item> items;
    if (!s.empty() && s.front() == '{') {
      if (s.back() != '}') bad_asm(text, "a vector operand without its closing brace");
      s = s.substr(1, s.size() - 2);
      size_t from = 0;
      while (from <= s.size()) {
        const size_t comma = s.find(',', from);
        items.push_back(parse_item(text, s.substr(from, comma == std::string_view::npos ? s.npos : comma - from)));
        if (comma == std::string_view::npos) break;
        from = comma + 1;
      }
    } else {
      items.push_back(parse_item(text, s));
    }
    ins.operands.push_back(items);
  }
  const std::string& op = ins.opcode;
  auto shape = [&](size_t operands, std::initializer_list<size_t> sizes) {
    if (ins.operands.size() != operands) bad_asm(text, "the wrong number of operands");
    size_t i = 0;
    for (size_t n : sizes) {
      if (ins.operands[i++].size() != n) bad_asm(text, "a vector operand of the wrong length");
    }
  };
  if (op == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") {
    ins.kind = Kind::kMma;
    shape(4, {4, 4, 2, 4});
  } else if (op.starts_with("ldmatrix.sync.aligned.m8n8.")) {
    ins.kind = Kind::kLdmatrix;
    const std::string tail = op.substr(std::string("ldmatrix.sync.aligned.m8n8.").size());
    for (const auto* form : {"x1", "x2", "x4"}) {
      for (const bool trans : {false, true}) {
        for (const auto* state_space : {".shared", ".shared::cta"}) {
          if (tail == std::string(form) + (trans ? ".trans" : "") + state_space + ".b16") {
            ins.matrices = form[1] - '0';
            ins.trans = trans;
          }
        }
      }
    }
    if (ins.matrices == 0) bad_asm(text, "an ldmatrix form the emulator does not know");
    shape(2, {static_cast<size_t>(ins.matrices), 1});
    if (ins.operands[1][0].type != Item::kAddr) bad_asm(text, "ldmatrix's address is not [%n]");
  } else if (op == "cp.async.cg.shared.global" || op == "cp.async.ca.shared.global" ||
             op == "cp.async.cg.shared::cta.global" || op == "cp.async.ca.shared::cta.global") {
    ins.kind = Kind::kCpAsync;
    if (ins.operands.size() != 3 && ins.operands.size() != 4) bad_asm(text, "cp.async takes 3 or 4 operands");
    if (ins.operands[0][0].type != Item::kAddr || ins.operands[1][0].type != Item::kAddr ||
        ins.operands[2][0].type != Item::kImm) {
      bad_asm(text, "cp.async's operands are not [dst], [src], cp-size");
    }
    const int64_t size = ins.operands[2][0].value;
    if (op.find(".cg.") != std::string::npos ? size != 16 : (size != 4 && size != 8 && size != 16)) {
      bad_asm(text, "a cp-size cp.async does not allow (.cg: 16; .ca: 4, 8 or 16)");
    }
  } else if (op == "cp.async.commit_group") {
    ins.kind = Kind::kCommit;
    shape(0, {});
  } else if (op == "cp.async.wait_group") {
    ins.kind = Kind::kWaitGroup;
    shape(1, {1});
  } else if (op == "cp.async.wait_all") {
    ins.kind = Kind::kWaitAll;
    shape(0, {});
  } else {
    bad_asm(text, "a PTX instruction the emulator does not implement");
  }
  return ins;
}

// Parsed once per asm statement: its text is a string literal, so its address identifies it.
const Instruction& instruction(const char* text) {
  static std::mutex mutex;
  static std::unordered_map<const char*, Instruction> parsed;
  thread_local std::unordered_map<const char*, const Instruction*> cache;
  if (const auto it = cache.find(text); it != cache.end()) return *it->second;
  const std::lock_guard lock(mutex);
  auto it = parsed.find(text);
  if (it == parsed.end()) it = parsed.emplace(text, parse(text)).first;
  cache[text] = &it->second;
  return it->second;
}

// Reads and writes of the asm's numbered operands, checked against their constraints.
class Operands {
 public:
  Operands(const char* text, std::initializer_list<AsmOperand> out, std::initializer_list<AsmOperand> in)
      : text_(text), out_(out), in_(in) {}
  const AsmOperand& at(const Item& item) const {
    if (item.type == Item::kImm) fatal("an immediate where the instruction needs a register", text_);
    const auto n = static_cast<size_t>(item.value);
    if (item.value < 0 || n >= out_.size() + in_.size()) fatal("operand number out of range", text_);
    return n < out_.size() ? out_.begin()[n] : in_.begin()[n - out_.size()];
  }
  // A 32-bit register with constraint letter `letter` ('r' or 'f'); an input or a "+" output.
  uint32_t read32(const Item& item, char letter) const {
    const AsmOperand& o = at(item);
    check_letter(o, letter);
    if (o.ref == nullptr) return static_cast<uint32_t>(o.value);
    if (o.constraint[0] != '+') fatal("the instruction reads a write-only (=) output operand", text_);
    uint32_t v;
    std::memcpy(&v, o.ref, 4);
    return v;
  }
  uint64_t read_value(const Item& item) const {
    if (item.type == Item::kImm) return static_cast<uint64_t>(item.value);
    const AsmOperand& o = at(item);
    if (o.ref != nullptr) fatal("an output operand used as an input", text_);
    return o.value;
  }
  void write32(const Item& item, char letter, uint32_t v) const {
    const AsmOperand& o = at(item);
    check_letter(o, letter);
    if (o.ref == nullptr || static_cast<size_t>(item.value) >= out_.size()) fatal("writes an input operand", text_);
    std::memcpy(o.ref, &v, 4);
  }

 private:
  // "r", "=r", "+f": the letter follows an optional modifier.
  void check_letter(const AsmOperand& o, char letter) const {
    const char c = o.constraint[0] == '=' || o.constraint[0] == '+' ? o.constraint[1] : o.constraint[0];
    if (c != letter || o.size != 4)
      fatal("an operand's constraint does not fit the instruction's register type", text_);
  }
  const char* text_;
  std::initializer_list<AsmOperand> out_, in_;
};

void land(const PendingCopy& c) {
  std::byte* dst = shared_at(*lane().warp->block, c.dst, c.bytes);
  if (c.src_bytes > 0) std::memcpy(dst, c.src, c.src_bytes);
  std::memset(dst + c.src_bytes, 0, c.bytes - c.src_bytes);  // zero-fill past src-size
}

void cp_async(const Instruction& ins, const Operands& ops) {
  const Item& size_item = ins.operands.size() == 4 ? ins.operands[3][0] : ins.operands[2][0];
  const PendingCopy c{ops.read_value(ins.operands[0][0]),
                      reinterpret_cast<const void*>(static_cast<uintptr_t>(ops.read_value(ins.operands[1][0]))),
                      static_cast<uint32_t>(ins.operands[2][0].value),
                      static_cast<uint32_t>(ops.read_value(size_item))};
  if (c.src_bytes > c.bytes) fatal("cp.async with src-size above cp-size", ins.opcode.c_str());
  if (c.dst % c.bytes != 0 || reinterpret_cast<uintptr_t>(c.src) % c.bytes != 0) {
    fatal("cp.async addresses not aligned to cp-size", ins.opcode.c_str());
  }
  if (c.src_bytes > 0) check_global_read(c.src, c.src_bytes);
  std::byte* dst = shared_at(*lane().warp->block, c.dst, c.bytes);
  count_copy();
  if (copy_mode() == CopyMode::kEager) {
    land(c);
  } else {
    std::memset(dst, 0xff, c.bytes);  // undefined until the wait: NaN to whoever reads it early
  }
  lane().open.push_back(c);
}

void wait_groups(size_t pending) {
  Lane& me = lane();
  while (me.groups.size() > pending) {
    if (copy_mode() == CopyMode::kDeferred) {
      for (const PendingCopy& c : me.groups.front()) land(c);
    }
    me.groups.pop_front();
  }
}

// ---- warp collectives ----------------------------------------------------------------------------

void mma_all(Slot& slot) {
  float a[16][16], b[16][8], c[16][8];
  for (int l = 0; l < kWarpLanes; ++l) {
    const int g = l / 4, t = l % 4;
    const uint32_t* in = slot.in[l];
    for (int r = 0; r < 4; ++r) {
      const int row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
      a[row][col] = lo_half(in[r]);
      a[row][col + 1] = hi_half(in[r]);
    }
    for (int r = 0; r < 2; ++r) {
      b[2 * t + 8 * r][g] = lo_half(in[4 + r]);
      b[2 * t + 8 * r + 1][g] = hi_half(in[4 + r]);
    }
    for (int e = 0; e < 4; ++e) c[g + 8 * (e / 2)][2 * t + e % 2] = bits_float(in[6 + e]);
  }
  for (int l = 0; l < kWarpLanes; ++l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
      // f32 accumulation; each product of two bf16 values is exact in f32.
      float acc = c[row][col];
      for (int k = 0; k < 16; ++k) acc += a[row][k] * b[k][col];
      slot.out[l][e] = float_bits(acc);
    }
  }
}

void ldmatrix_all(const Warp& warp, Slot& slot) {
  const int matrices = static_cast<int>(slot.in[0][1]);
  const bool trans = slot.in[0][2] != 0;
  uint16_t m[4][8][8];  // [matrix][row as addressed][column]
  for (int i = 0; i < matrices; ++i) {
    for (int r = 0; r < 8; ++r) {
      const uint32_t address = slot.in[8 * i + r][0];
      if (address % 16 != 0) fatal("ldmatrix row address not 16-byte aligned");
      std::memcpy(m[i][r], shared_at(*warp.block, address, 16), 16);
    }
  }
  for (int l = 0; l < kWarpLanes; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < matrices; ++i) {
      const uint16_t lo = trans ? m[i][2 * t][g] : m[i][g][2 * t];
      const uint16_t hi = trans ? m[i][2 * t + 1][g] : m[i][g][2 * t + 1];
      slot.out[l][i] = uint32_t{lo} | (uint32_t{hi} << 16);
    }
  }
}

void shuffle_all(const Warp& warp, Slot& slot) {
  const auto kind = static_cast<ShuffleKind>(slot.in[0][2]);
  const unsigned full = warp.lanes == kWarpLanes ? 0xffffffffu : (1u << warp.lanes) - 1;
  for (int l = 0; l < warp.lanes; ++l) {
    if (slot.in[l][4] != full) fatal("a shuffle whose mask is not the whole warp (the emulator runs every lane)");
    const int operand = static_cast<int>(slot.in[l][3]), width = static_cast<int>(slot.in[l][5]);
    const int base = l / width * width, pos = l % width;
    int src = l;
    switch (kind) {
      case ShuffleKind::kXor:
        src = base + ((pos ^ operand) % width);
        break;
      case ShuffleKind::kDown:
        src = pos + operand < width ? l + operand : l;
        break;
      case ShuffleKind::kUp:
        src = pos >= operand ? l - operand : l;
        break;
      case ShuffleKind::kIndex:
        src = base + operand % width;
        break;
    }
    if (src >= warp.lanes) src = l;
    slot.out[l][0] = slot.in[src][0];
    slot.out[l][1] = slot.in[src][1];
  }
}

}  // namespace

void compute_collective(const Warp& warp, Slot& slot) {
  switch (slot.op[0]) {
    case Op::kMma:
      if (warp.lanes != kWarpLanes) fatal("mma.sync in a partial warp");
      return mma_all(slot);
    case Op::kLdmatrix:
      if (warp.lanes != kWarpLanes) fatal("ldmatrix in a partial warp");
      return ldmatrix_all(warp, slot);
    case Op::kShuffle:
      return shuffle_all(warp, slot);
  }
}

uint64_t shuffle(ShuffleKind kind, unsigned mask, uint64_t bits, int operand, int width) {
  static constexpr char kTags[4] = {};
  if (width <= 0 || width > kWarpLanes || (width & (width - 1)) != 0) fatal("a shuffle width that is not 2^k <= 32");
  const uint32_t in[6] = {static_cast<uint32_t>(bits),
                          static_cast<uint32_t>(bits >> 32),
                          static_cast<uint32_t>(kind),
                          static_cast<uint32_t>(operand),
                          mask,
                          static_cast<uint32_t>(width)};
  const uint32_t* out = collective(Op::kShuffle, &kTags[static_cast<int>(kind)], in, 6);
  return uint64_t{out[0]} | (uint64_t{out[1]} << 32);
}

void ptx_asm(const char* text, std::initializer_list<AsmOperand> outputs, std::initializer_list<AsmOperand> inputs) {
  const Instruction& ins = instruction(text);
  const Operands ops(text, outputs, inputs);
  switch (ins.kind) {
    case Kind::kMma: {
      uint32_t in[10];
      for (int r = 0; r < 4; ++r) in[r] = ops.read32(ins.operands[1][static_cast<size_t>(r)], 'r');
      for (int r = 0; r < 2; ++r) in[4 + r] = ops.read32(ins.operands[2][static_cast<size_t>(r)], 'r');
      for (int e = 0; e < 4; ++e) in[6 + e] = ops.read32(ins.operands[3][static_cast<size_t>(e)], 'f');
      const uint32_t* out = collective(Op::kMma, &ins, in, 10);
      uint32_t d[4];
      std::copy(out, out + 4, d);  // C may be D's own registers: read every input before writing
      for (int e = 0; e < 4; ++e) ops.write32(ins.operands[0][static_cast<size_t>(e)], 'f', d[e]);
      return;
    }
    case Kind::kLdmatrix: {
      const uint32_t in[3] = {static_cast<uint32_t>(ops.read_value(ins.operands[1][0])),
                              static_cast<uint32_t>(ins.matrices), ins.trans ? 1u : 0u};
      const uint32_t* out = collective(Op::kLdmatrix, &ins, in, 3);
      uint32_t d[4];
      std::copy(out, out + ins.matrices, d);
      for (int i = 0; i < ins.matrices; ++i) ops.write32(ins.operands[0][static_cast<size_t>(i)], 'r', d[i]);
      return;
    }
    case Kind::kCpAsync:
      return cp_async(ins, ops);
    case Kind::kCommit:
      lane().groups.push_back(std::move(lane().open));
      lane().open.clear();
      return;
    case Kind::kWaitGroup:
      return wait_groups(static_cast<size_t>(ops.read_value(ins.operands[0][0])));
    case Kind::kWaitAll:
      lane().groups.push_back(std::move(lane().open));
      lane().open.clear();
      return wait_groups(0);
  }
}

}  // namespace tandem_emul
