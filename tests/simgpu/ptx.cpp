#include "ptx.h"

#include <cctype>
#include <cstdlib>

namespace fikit::simgpu {
namespace {

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.'; }

void skip_space(std::string_view s, size_t& i) {
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
    } else if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (s.compare(i, 2, "/*") == 0) {
      size_t end = s.find("*/", i + 2);
      i = end == std::string_view::npos ? s.size() : end + 2;
    } else {
      return;
    }
  }
}

std::string_view token(std::string_view s, size_t& i) {
  skip_space(s, i);
  size_t start = i;
  while (i < s.size() && is_ident(s[i])) ++i;
  return s.substr(start, i - start);
}

uint32_t scalar_size(std::string_view type) {
  if (type.size() < 3) return 0;
  int bits = std::atoi(std::string(type.substr(2)).c_str());
  return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? static_cast<uint32_t>(bits / 8) : 0;
}

// One ".param [.align N] .TYPE NAME[COUNT]" declaration starting at i.
bool parse_param(std::string_view s, size_t& i, PtxParam* out) {
  if (token(s, i) != ".param") return false;
  std::string_view type = token(s, i);
  if (type == ".align") {
    token(s, i);  // the alignment value
    type = token(s, i);
  }
  out->type = std::string(type);
  out->size = scalar_size(type);
  if (out->size == 0) return false;
  skip_space(s, i);
  while (i < s.size() && s[i] != ',' && s[i] != ')' && s[i] != '[') ++i;  // .ptr qualifiers and the name
  if (i < s.size() && s[i] == '[') {
    out->size *= static_cast<uint32_t>(std::strtoul(std::string(s.substr(i + 1, 12)).c_str(), nullptr, 10));
    while (i < s.size() && s[i] != ']') ++i;
    if (i < s.size()) ++i;
  }
  return true;
}

}  // namespace

bool parse_ptx(std::string_view text, std::vector<PtxEntry>* entries) {
  entries->clear();
  bool looks_like_ptx = text.find(".version") != std::string_view::npos;
  for (size_t at = text.find(".entry"); at != std::string_view::npos; at = text.find(".entry", at + 6)) {
    looks_like_ptx = true;
    size_t i = at + 6;
    if (i < text.size() && is_ident(text[i])) continue;  // e.g. ".entryfoo" is not the directive
    PtxEntry entry;
    entry.name = std::string(token(text, i));
    if (entry.name.empty()) return false;
    skip_space(text, i);
    if (i < text.size() && text[i] == '(') {
      ++i;
      for (;;) {
        skip_space(text, i);
        if (i >= text.size()) return false;
        if (text[i] == ')') break;
        if (text[i] == ',') { ++i; continue; }
        PtxParam p;
        if (!parse_param(text, i, &p)) return false;
        entry.params.push_back(std::move(p));
      }
    }
    entries->push_back(std::move(entry));
  }
  return looks_like_ptx;
}

}  // namespace fikit::simgpu
