"""The tagless transport's C++ codec, generated from the schema as the study's Kodosis generates its own.

`python -m contracts.tagless_cpp OUT.h [--schema PATH]` writes one self-contained C++17 header: a
struct per message with its fields as plain members, each with `encode` (appends the payload's bytes),
`decode` (false on any payload `contracts.tagless` refuses: short, a count past the end, a string that
is not strict UTF-8, bytes left over), `size` and `canonical` (the values as `tagless_vectors.canonical`
prints them); the frame's header and timing trailer, the statuses and the TIMING flag, taken from
`contracts.tagless` itself so the two cannot drift; the method ids; and `roundtrip`, a decoder looked
up by a message's name, which the vector checker (server/cpp_tagless/vectors.cc) runs over
`contracts/tagless_vectors.txt`.

Generated per field, not by a table walked at run time: a run of scalars is one bounds check and
fixed offsets, and members of one type in a row (the study's `int32 m[1..K]`) one copy, which is the
point of a tagless format. Names C++ or the header would read otherwise (keywords, the header's own
names, the standard headers' macros) are refused with the schema's error. The output is never kept in the repository
(server/cpp_tagless/Makefile writes it into build/); the same schema always gives the same bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import struct
import sys
from pathlib import Path

from contracts.tagless import HEADER, SCALARS, TIMING, Field, Message, Schema, Status, Timing, parse, study

CPP = {t: f"{t}_t" if "int" in t else t for t in SCALARS}  # int32 -> int32_t; float, double as they are
HEADER_FIELDS = ("call_id", "method_id", "flags", "status", "payload_length", "trailer_length")
HEADER_TYPES = {"I": "uint32_t", "H": "uint16_t", "B": "uint8_t"}
W = "::tagless::wire::"  # fully qualified: no field's name can hide it
# C++'s keywords and the names the header itself declares: no message, field or method may take one
_KEYWORDS = (
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t "
    "char32_t class compl concept const consteval constexpr constinit const_cast continue co_await "
    "co_return co_yield decltype default delete do double dynamic_cast else enum explicit export "
    "extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq "
    "nullptr operator or or_eq private protected public register reinterpret_cast requires return "
    "short signed sizeof static static_assert static_cast struct switch template this thread_local "
    "throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while "
    "xor xor_eq final override"
)
KEYWORDS = set(_KEYWORDS.split())
RESERVED = {"tagless", "wire", "method", "std", "Header", "Timing", "Status", "Outcome", "MethodInfo"}
RESERVED |= {"kMethods", "kMessages", "kService", "kHeaderSize", "kTiming", "roundtrip", "roundtrip_as"}
RESERVED |= {"encode_frame", "decode_frame", "encode_error", "Roundtrip", "MessageInfo", "NDEBUG", "errno"}
MACROS = {"assert", "offsetof", "NULL", "EOF", "BUFSIZ", "stdin", "stdout", "stderr", "SEEK_SET", "SEEK_CUR"}
MACROS |= {"SEEK_END", "TMP_MAX", "FOPEN_MAX", "FILENAME_MAX", "L_tmpnam", "INFINITY", "NAN", "HUGE_VAL"}
TAKEN = KEYWORDS | RESERVED | MACROS
MEMBERS = {"size", "encode", "decode", "canonical"}  # a message's member functions

RUNTIME = r"""
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace tagless {
namespace wire {

// Little-endian hosts copy bytes as they are; others take the portable path, byte by byte.
constexpr bool kLittle = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t,
             std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;

// A scalar's bytes, little-endian, at `p`; and the scalar whose bytes start at `p`.
template <typename T>
inline void store(char* p, T v) {
  Bits<T> u;
  std::memcpy(&u, &v, sizeof v);
  if constexpr (kLittle) std::memcpy(p, &u, sizeof u);
  else for (size_t i = 0; i < sizeof u; ++i) p[i] = static_cast<char>(u >> (8 * i) & 0xFF);
}
template <typename T>
inline T load(const char* p) {
  Bits<T> u = 0;
  if constexpr (kLittle) std::memcpy(&u, p, sizeof u);
  else for (size_t i = 0; i < sizeof u; ++i) u = static_cast<Bits<T>>(u | Bits<T>(static_cast<unsigned char>(p[i])) << (8 * i));
  T v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// `count` scalars of one type in a row, from a struct's members at `members` (contiguous: each
// message's static_asserts check it) to their bytes at `p`, and back.
template <typename T>
inline void store_block(char* p, const char* members, size_t count) {
  if constexpr (kLittle) { std::memcpy(p, members, count * sizeof(T)); return; }
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, members + i * sizeof(T), sizeof v);
    store<T>(p + i * sizeof(T), v);
  }
}
template <typename T>
inline void load_block(char* members, const char* p, size_t count) {
  if constexpr (kLittle) { std::memcpy(members, p, count * sizeof(T)); return; }
  for (size_t i = 0; i < count; ++i) {
    T v = load<T>(p + i * sizeof(T));
    std::memcpy(members + i * sizeof(T), &v, sizeof v);
  }
}

// `n` more bytes at the end of `out`: where they start.
inline char* grow(std::string& out, size_t n) {
  size_t at = out.size();
  out.resize(at + n);
  return &out[at];
}

// A string or bytes field: a uint32 byte count, then the bytes; a repeated one: the count, the values.
inline void put_bytes(std::string& out, const std::string& v) {
  store<uint32_t>(grow(out, 4), static_cast<uint32_t>(v.size()));
  out += v;
}
template <typename T>
inline void put_repeated(std::string& out, const std::vector<T>& v) {
  char* p = grow(out, 4 + v.size() * sizeof(T));
  store<uint32_t>(p, static_cast<uint32_t>(v.size()));
  if (!v.empty()) store_block<T>(p + 4, reinterpret_cast<const char*>(v.data()), v.size());
}

// UTF-8 as Python's strict decoder takes it: no overlong forms, no surrogates, nothing past U+10FFFF.
inline bool valid_utf8(const char* text, size_t n) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text);
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i], lo = 0x80, hi = 0xBF;  // lo, hi: the second byte's range
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (c == 0xE0) lo = 0xA0;       // overlong
    else if (c == 0xED) hi = 0x9F;  // surrogates
    else if (c == 0xF0) lo = 0x90;  // overlong
    else if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    if (!len || n - i < len) return false;
    if (len > 1 && (s[i + 1] < lo || s[i + 1] > hi)) return false;
    for (size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
    i += len;
  }
  return true;
}

// A payload being read: each step false when the payload cannot hold what comes next.
struct Reader {
  const char* p;
  size_t n, at;

  bool has(size_t k) const { return k <= n - at; }
  const char* here() const { return p + at; }
  bool count(size_t itemsize, uint32_t& k) {
    if (!has(4)) return false;
    k = load<uint32_t>(p + at);
    at += 4;
    return static_cast<uint64_t>(k) * itemsize <= n - at;
  }
  bool bytes(std::string& v) {
    uint32_t k;
    if (!count(1, k)) return false;
    v.assign(p + at, k);
    at += k;
    return true;
  }
  bool text(std::string& v) { return bytes(v) && valid_utf8(v.data(), v.size()); }
  template <typename T>
  bool repeated(std::vector<T>& v) {
    uint32_t k;
    if (!count(sizeof(T), k)) return false;
    v.resize(k);
    if (k) load_block<T>(reinterpret_cast<char*>(v.data()), p + at, k);
    at += k * sizeof(T);
    return true;
  }
};

// Values as contracts/tagless_vectors.py's `canonical` writes them: integers in decimal, floats as
// %.17g (any NaN as `nan`, as Python writes it), bytes as x<hex>, lists as [a,b], fields space apart.
template <typename T>
inline void number(std::string& out, T v) {
  char buf[40];
  if constexpr (!std::is_floating_point<T>::value) out += std::to_string(v);
  else if (std::isnan(v)) out += "nan";
  else out.append(buf, static_cast<size_t>(std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(v))));
}
template <typename T>
inline void numbers(std::string& out, const char* members, size_t count) {  // as store_block's
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, members + i * sizeof(T), sizeof v);
    if (i) out += ' ';
    number(out, v);
  }
}
template <typename T>
inline void list(std::string& out, const std::vector<T>& v) {
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    number(out, v[i]);
  }
  out += ']';
}
inline void hex(std::string& out, const std::string& v) {
  static const char digits[] = "0123456789abcdef";
  out += 'x';
  for (unsigned char c : v) (out += digits[c >> 4]) += digits[c & 15];
}

}  // namespace wire
"""

FRAMES = r"""
// A whole frame: the header (its lengths set from the parts), the payload, the trailer.
inline void encode_frame(std::string& out, Header head, const std::string& payload, const std::string& trailer) {
  head.payload_length = static_cast<uint32_t>(payload.size());
  head.trailer_length = static_cast<uint32_t>(trailer.size());
  out.reserve(out.size() + kHeaderSize + payload.size() + trailer.size());
  head.encode(out);
  out += payload;
  out += trailer;
}

// Exactly one frame in `p`: its header, payload and trailer; else false.
inline bool decode_frame(const char* p, size_t n, Header& head, std::string& payload, std::string& trailer) {
  if (!head.decode(p, n) || uint64_t{kHeaderSize} + head.payload_length + head.trailer_length != n) return false;
  payload.assign(p + kHeaderSize, head.payload_length);
  trailer.assign(p + kHeaderSize + head.payload_length, head.trailer_length);
  return true;
}

// An error reply: its status, and its message as the payload (a tagless string).
inline void encode_error(std::string& out, uint32_t call_id, uint16_t method_id, Status status, const std::string& message) {
  std::string payload;
  wire::put_bytes(payload, message);
  encode_frame(out, Header{call_id, method_id, 0, static_cast<uint8_t>(status), 0, 0}, payload, std::string());
}

enum class Outcome { ok, unknown_message, malformed };

// A payload decoded as message M: its canonical text, and its bytes encoded again.
template <typename M>
inline Outcome roundtrip_as(const char* p, size_t n, std::string& canonical, std::string& encoded) {
  M m;
  if (!m.decode(p, n)) return Outcome::malformed;
  canonical = m.canonical();
  encoded.clear();
  m.encode(encoded);
  return Outcome::ok;
}

using Roundtrip = Outcome (*)(const char*, size_t, std::string&, std::string&);
struct MessageInfo {
  const char* name;
  Roundtrip roundtrip;
};
struct MethodInfo {
  uint16_t id;
  const char* name;
  const char* request;
  const char* reply;
};
"""

DISPATCH = r"""
// roundtrip_as for the message named `name`: unknown_message when the schema has none.
inline Outcome roundtrip(const std::string& name, const char* p, size_t n, std::string& canonical, std::string& encoded) {
  for (const MessageInfo& m : kMessages)
    if (name == m.name) return m.roundtrip(p, n, canonical, encoded);
  return Outcome::unknown_message;
}
}  // namespace tagless
"""


def check_names(schema: Schema) -> None:
    """A ValueError naming the first message, field or method the C++ cannot declare as written."""

    def bad(name: str) -> bool:
        limit = re.fullmatch(r"[A-Z0-9_]*_(MAX|MIN|C)|HUGE_VAL\w*", name)  # INT32_MAX, UINT64_C, ...
        return name in TAKEN or name.startswith("_") or "__" in name or name.endswith("_t") or bool(limit)

    for m in schema.messages.values():
        if bad(m.name):
            raise ValueError(f"message {m.name}: a name C++ or the generated header already uses")
        for f in m.fields:
            if bad(f.name) or f.name in MEMBERS or f.name == m.name:
                raise ValueError(f"message {m.name}: field {f.name} is a name C++ or the header uses")
    for method in schema.methods.values():
        if bad(method.name):
            raise ValueError(f"method {method.id} {method.name}: a name C++ or the header uses")


def _fixed(f: Field) -> bool:
    return f.type in SCALARS and not f.repeated


def _size(f: Field) -> int:
    return struct.calcsize("<" + SCALARS[f.type])


def _parts(message: Message) -> list:
    """The fields in wire order as parts: a field of variable size alone, or a run of scalars as
    (its bytes, its blocks), a block being (offset, C++ type, first member, last member, count), the
    members of one type in a row (copied at once; the struct's static_asserts check them contiguous)."""
    parts: list = []
    for f in message.fields:
        if not _fixed(f):
            parts.append(f)
            continue
        if not parts or not isinstance(parts[-1], tuple):
            parts.append((0, []))
        total, blocks = parts[-1]
        if blocks and blocks[-1][1] == CPP[f.type]:
            at, t, first, _, count = blocks[-1]
            blocks[-1] = (at, t, first, f.name, count + 1)
        else:
            blocks.append((total, CPP[f.type], f.name, f.name, 1))
        parts[-1] = (total + _size(f), blocks)
    return parts


def _methods(message: Message) -> list[str]:
    """The struct's size, encode, decode and canonical, a few statements per part."""
    at = f"reinterpret_cast<const char*>(this) + offsetof({message.name}, "
    size, encode, decode, canonical = ["0"], [], [], []
    for part in _parts(message):
        if canonical:
            canonical.append("out += ' ';")
        if isinstance(part, Field):
            step = "repeated" if part.repeated else "text" if part.type == "string" else "bytes"
            unit = f" * sizeof({CPP[part.type]})" if part.repeated else ""
            size.append(f"4 + this->{part.name}.size(){unit}")
            encode.append(f"{W}put_{'repeated' if part.repeated else 'bytes'}(out, this->{part.name});")
            decode.append(f"if (!r.{step}(this->{part.name})) return false;")
            canonical.append(f"{W}{'list' if part.repeated else 'hex'}(out, this->{part.name});")
            continue
        total, blocks = part
        size.append(str(total))
        encode.append(f"{{\n      char* b = {W}grow(out, {total});")
        decode += [f"if (!r.has({total})) return false;", "{\n      const char* b = r.here();"]
        for i, (offset, t, first, _, count) in enumerate(blocks):
            canonical += ["out += ' ';"] * bool(i)
            if count == 1:  # a member alone: by its name
                encode.append(f"  {W}store<{t}>(b + {offset}, this->{first});")
                decode.append(f"  this->{first} = {W}load<{t}>(b + {offset});")
                canonical.append(f"{W}number(out, this->{first});")
                continue
            base = f"{at}{first})"
            mutable = base.replace("const char*", "char*")
            encode.append(f"  {W}store_block<{t}>(b + {offset}, {base}, {count});")
            decode.append(f"  {W}load_block<{t}>({mutable}, b + {offset}, {count});")
            canonical.append(f"{W}numbers<{t}>(out, {base}, {count});")
        encode.append("}")
        decode += ["}", f"r.at += {total};"]
    body = [f"  size_t size() const {{ return {' + '.join(size[1:]) or '0'}; }}  // the payload's bytes"]
    body += ["  void encode(std::string& out) const {", "    out.reserve(out.size() + size());"]
    body += [f"    {line}" for line in encode] + ["  }", "  bool decode(const char* p, size_t n) {"]
    body += [f"    {W}Reader r{{p, n, 0}};", *(f"    {line}" for line in decode), "    return r.at == n;"]
    body += ["  }", "  std::string canonical() const {", "    std::string out;"]
    return [*body, *(f"    {line}" for line in canonical), "    return out;", "  }"]


def _struct(message: Message) -> list[str]:
    members = []
    for f in message.fields:
        t = CPP.get(f.type, "std::string")
        members.append(
            f"  std::vector<{t}> {f.name};" if f.repeated else f"  {t} {f.name}{' = 0' * _fixed(f)};"
        )
    asserts = [
        f"static_assert(offsetof({message.name}, {last}) - offsetof({message.name}, {first}) == "
        f'{count - 1} * sizeof({t}), "{message.name}.{first}..{last}: contiguous");'
        for part in _parts(message)
        if isinstance(part, tuple)
        for _, t, first, last, count in part[1]
        if count > 1
    ]
    return [f"struct {message.name} {{", *members, "", *_methods(message), "};", *asserts, ""]


def _frame_types() -> list[str]:
    """The header, the timing trailer, the statuses and the flag, from contracts.tagless's own."""
    lines = [f"constexpr size_t kHeaderSize = {HEADER.size};", f"constexpr uint8_t kTiming = {TIMING:#04x};"]
    lines += ["enum class Status : uint8_t {", *(f"  {s.name} = {int(s)}," for s in Status), "};", ""]
    timing = [f.name for f in dataclasses.fields(Timing)]
    assert HEADER.format[0] == Timing.LAYOUT.format[0] == "<" and Timing.LAYOUT.format == f"<{len(timing)}d"
    layouts = (
        (
            "Header",
            "A frame begins with its header.",
            "n < kHeaderSize",
            zip(HEADER.format[1:], HEADER_FIELDS, strict=True),
        ),
        (
            "Timing",
            "The stage times in seconds: a reply's trailer when its request asked (kTiming).",
            "n != kSize",
            (("d", n) for n in timing),
        ),
    )
    for name, what, short, layout in layouts:
        fields = [(HEADER_TYPES.get(code, "double"), f, struct.calcsize("<" + code)) for code, f in layout]
        offsets = [sum(n for _, _, n in fields[:i]) for i in range(len(fields))]
        lines += [f"// {what}", f"struct {name} {{", *(f"  {t} {f} = 0;" for t, f, _ in fields)]
        lines += [f"  static constexpr size_t kSize = {sum(n for _, _, n in fields)};"]
        lines += ["  void encode(std::string& out) const {", "    char* b = wire::grow(out, kSize);"]
        lines += [
            f"    wire::store<{t}>(b + {at}, {f});" for (t, f, _), at in zip(fields, offsets, strict=True)
        ]
        lines += ["  }", "  bool decode(const char* p, size_t n) {  // false when `n` cannot hold one"]
        lines += [f"    if ({short}) return false;"]
        lines += [
            f"    {f} = wire::load<{t}>(p + {at});" for (t, f, _), at in zip(fields, offsets, strict=True)
        ]
        lines += ["    return true;", "  }", "};", ""]
    return lines


def _dispatch(schema: Schema) -> list[str]:
    messages, methods = list(schema.messages.values()), list(schema.methods.values())
    lines = [f'constexpr const char* kService = "{schema.name}";', "namespace method {"]
    lines += [f"constexpr uint16_t {m.name} = {m.id};" for m in methods] + ["}  // namespace method"]
    lines += [f"constexpr std::array<MethodInfo, {len(methods)}> kMethods = {{{{"]
    lines += [f'    {{{m.id}, "{m.name}", "{m.request.name}", "{m.reply.name}"}},' for m in methods]
    lines += ["}};", f"constexpr std::array<MessageInfo, {len(messages)}> kMessages = {{{{"]
    return [*lines, *(f'    {{"{m.name}", roundtrip_as<{m.name}>}},' for m in messages), "}};"]


def generate(schema: Schema) -> str:
    """The header's text for `schema`; a ValueError when a name cannot be declared in C++."""
    check_names(schema)
    service = f" of service {schema.name}" if schema.name else ""
    head = (
        f"// Generated by `python -m contracts.tagless_cpp` from the tagless schema{service}: do not edit.\n"
    )
    head += "// The wire format is contracts/tagless.py's (its module docstring).\n#pragma once"
    body = _frame_types() + [FRAMES]
    for message in schema.messages.values():
        body += _struct(message)
    return head + RUNTIME + "\n" + "\n".join(body + _dispatch(schema)) + DISPATCH


def write(text: str, out: Path) -> None:
    """`text` into `out`, whole or not at all (a make run cut short leaves no half header)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m contracts.tagless_cpp", description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="the header to write")
    p.add_argument("--schema", type=Path, help="the IDL file (default: contracts/rpc_study.tagless)")
    args = p.parse_args(argv)
    try:
        schema = parse(args.schema.read_text()) if args.schema else study()
        text = generate(schema)
    except (OSError, ValueError) as exc:
        where = args.schema or "contracts/rpc_study.tagless"
        print(f"error: {where}: {exc} (fix: correct the schema)", file=sys.stderr)
        return 2
    try:
        write(text, args.out)
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc} (fix: a writable path)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
