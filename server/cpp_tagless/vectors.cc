// The shared test vectors (contracts/tagless_vectors.txt) checked against the generated C++ codec, so
// that the C++ server reads and writes exactly the bytes the Python codec does.
//
//   tagless-vectors VECTORS_FILE
//
// Each `message NAME HEX = VALUES` line: the payload decodes, prints VALUES (contracts/tagless_vectors.py
// `canonical`) and encodes back to HEX. Each `frame CALL METHOD FLAGS STATUS PAYLOAD TRAILER = HEX`: the
// frame built from its parts is HEX, and HEX reads back as those parts. Each `bad NAME HEX`: the decoder
// refuses it. One line per failure, then `N vectors ok` (exit 0) or `F of N vectors failed` (exit 1).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tagless_study.h"

namespace {

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ' ') out.emplace_back();
    else out.back() += c;
  }
  return out;
}

// `-` is no bytes; else two lowercase or uppercase hex digits a byte.
bool unhex(const std::string& text, std::string& out) {
  out.clear();
  if (text == "-") return true;
  if (text.empty() || text.size() % 2) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < text.size(); i += 2) {
    int hi = digit(text[i]), lo = digit(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

std::string hex(const std::string& bytes) {
  std::string out;
  tagless::wire::hex(out, bytes);
  return out.size() == 1 ? "-" : out.substr(1);
}

bool number(const std::string& text, uint64_t max, uint64_t& out) {
  if (text.empty() || text.size() > 20) return false;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (*end || text[0] == '-' || v > max) return false;
  out = v;
  return true;
}

std::string shorten(const std::string& text) { return text.size() <= 120 ? text : text.substr(0, 117) + "..."; }

// One vector line: "" when it holds, else what is wrong.
std::string check_message(const std::vector<std::string>& w) {
  std::string payload, canonical, encoded;
  if (w.size() < 4 || w[3] != "=" || !unhex(w[2], payload)) return "not `message NAME HEX = VALUES`";
  std::string expected;
  for (size_t i = 4; i < w.size(); ++i) expected += (i > 4 ? " " : "") + w[i];
  switch (tagless::roundtrip(w[1], payload.data(), payload.size(), canonical, encoded)) {
    case tagless::Outcome::unknown_message: return "no message " + w[1] + " in the generated codec";
    case tagless::Outcome::malformed: return "the decoder refused the payload";
    case tagless::Outcome::ok: break;
  }
  if (canonical != expected) return "decoded as `" + shorten(canonical) + "`, not `" + shorten(expected) + "`";
  if (encoded != payload) return "encoded back as " + shorten(hex(encoded));
  return "";
}

std::string check_frame(const std::vector<std::string>& w) {
  uint64_t call, method, flags, status;
  std::string payload, trailer, whole;
  if (w.size() != 9 || w[7] != "=" || !number(w[1], UINT32_MAX, call) || !number(w[2], UINT16_MAX, method) ||
      !number(w[3], UINT8_MAX, flags) || !number(w[4], UINT8_MAX, status) || !unhex(w[5], payload) ||
      !unhex(w[6], trailer) || !unhex(w[8], whole))
    return "not `frame CALL METHOD FLAGS STATUS PAYLOAD TRAILER = HEX`";
  tagless::Header head;
  head.call_id = static_cast<uint32_t>(call);
  head.method_id = static_cast<uint16_t>(method);
  head.flags = static_cast<uint8_t>(flags);
  head.status = static_cast<uint8_t>(status);
  std::string built;
  tagless::encode_frame(built, head, payload, trailer);
  if (built != whole) return "built as " + shorten(hex(built));
  tagless::Header back;
  std::string back_payload, back_trailer;
  if (!tagless::decode_frame(whole.data(), whole.size(), back, back_payload, back_trailer)) return "does not read back";
  if (back.call_id != call || back.method_id != method || back.flags != flags || back.status != status ||
      back_payload != payload || back_trailer != trailer)
    return "reads back as other parts";
  tagless::Timing timing;
  if (trailer.size() == tagless::Timing::kSize) {  // a timing trailer: it reads and writes alike too
    std::string again;
    if (!timing.decode(trailer.data(), trailer.size())) return "its timing trailer does not read";
    timing.encode(again);
    if (again != trailer) return "its timing trailer writes back as " + hex(again);
  }
  return "";
}

std::string check_bad(const std::vector<std::string>& w) {
  std::string payload, canonical, encoded;
  if (w.size() != 3 || !unhex(w[2], payload)) return "not `bad NAME HEX`";
  switch (tagless::roundtrip(w[1], payload.data(), payload.size(), canonical, encoded)) {
    case tagless::Outcome::unknown_message: return "no message " + w[1] + " in the generated codec";
    case tagless::Outcome::ok: return "decoded a payload it must refuse, as `" + shorten(canonical) + "`";
    case tagless::Outcome::malformed: break;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "error: no vectors file (fix: tagless-vectors contracts/tagless_vectors.txt)\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "error: cannot read %s (fix: a path to contracts/tagless_vectors.txt)\n", argv[1]);
    return 2;
  }
  std::string line;
  int count = 0, failed = 0, number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> w = words(line);
    std::string problem;
    if (w[0] == "message") problem = check_message(w);
    else if (w[0] == "frame") problem = check_frame(w);
    else if (w[0] == "bad") problem = check_bad(w);
    else problem = "an unknown kind of vector `" + w[0] + "`";
    ++count;
    if (!problem.empty()) {
      ++failed;
      std::printf("line %d: %s %s: %s\n", number, w[0].c_str(), w.size() > 1 ? w[1].c_str() : "", problem.c_str());
    }
  }
  if (failed) {
    std::printf("%d of %d vectors failed\n", failed, count);
    return 1;
  }
  if (!count) {
    std::printf("no vectors in %s\n", argv[1]);
    return 1;
  }
  std::printf("%d vectors ok\n", count);
  return 0;
}
