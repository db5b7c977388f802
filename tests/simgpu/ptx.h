#pragma once
// Just enough PTX reading for the simulator: kernel names and their parameter lists, taken from
// `.entry NAME ( .param .u64 NAME_param_0, ... )`. Kernel bodies are never looked at.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fikit::simgpu {

struct PtxParam {
  std::string type;  // ".u64", ".f32", ".b8" ...
  uint32_t size;     // bytes (arrays: element size x count)
};

struct PtxEntry {
  std::string name;
  std::vector<PtxParam> params;
};

// False when the text is not PTX (no ".version" / ".entry" directive) or an entry is malformed.
bool parse_ptx(std::string_view text, std::vector<PtxEntry>* entries);

}  // namespace fikit::simgpu
