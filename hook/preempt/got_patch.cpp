#include "got_patch.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace fikit::hook::preempt {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobDat = R_AARCH64_GLOB_DAT;
#else
#error "got_patch.cpp: only x86-64 and AArch64"
#endif

struct Search {
  const char* library;
  const char* symbol;
  void* replacement;
  size_t patched;
  bool found;
};

// The dynamic loader relocates most address entries of .dynamic in place (glibc does, where the
// section is writable); where it did not, the entry is still relative to the object's base.
uintptr_t address_of(uintptr_t base, ElfW(Addr) ptr) { return ptr < base ? base + ptr : ptr; }

bool write_slot(const dl_phdr_info* info, uintptr_t slot, void* value) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t start = slot & ~(page - 1);
  // Under RELRO (the loader made it read-only after relocating) the page is opened for the write
  // and closed again; a slot outside it is writable already.
  bool relro = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_GNU_RELRO) continue;
    const uintptr_t lo = info->dlpi_addr + p.p_vaddr;
    if (slot >= lo && slot < lo + p.p_memsz) relro = true;
  }
  if (relro && mprotect(reinterpret_cast<void*>(start), page, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(reinterpret_cast<void**>(slot), value, __ATOMIC_RELEASE);
  if (relro) (void)mprotect(reinterpret_cast<void*>(start), page, PROT_READ);
  return true;
}

void patch_object(const dl_phdr_info* info, Search& s) {
  const uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(base + info->dlpi_phdr[i].p_vaddr);
  if (dyn == nullptr) return;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  size_t strsz = 0;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  bool rela_plt = true;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(address_of(base, d->d_un.d_ptr)); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(address_of(base, d->d_un.d_ptr)); break;
      case DT_STRSZ: strsz = d->d_un.d_val; break;
      case DT_JMPREL: tables[0] = reinterpret_cast<const ElfW(Rela)*>(address_of(base, d->d_un.d_ptr)); break;
      case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
      case DT_PLTREL: rela_plt = d->d_un.d_val == DT_RELA; break;
      case DT_RELA: tables[1] = reinterpret_cast<const ElfW(Rela)*>(address_of(base, d->d_un.d_ptr)); break;
      case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
      default: break;
    }
  }
  if (symtab == nullptr || strtab == nullptr || !rela_plt) return;
  for (int t = 0; t < 2; ++t) {
    if (tables[t] == nullptr) continue;
    for (size_t i = 0; i < sizes[t] / sizeof(ElfW(Rela)); ++i) {
      const ElfW(Rela)& r = tables[t][i];
      const uint32_t type = uint32_t(ELF64_R_TYPE(r.r_info));
      if (type != kJumpSlot && type != kGlobDat) continue;
      const ElfW(Word) name = symtab[ELF64_R_SYM(r.r_info)].st_name;
      if (name >= strsz || std::strcmp(strtab + name, s.symbol) != 0) continue;
      if (write_slot(info, base + r.r_offset, s.replacement)) ++s.patched;
    }
  }
}

int visit(dl_phdr_info* info, size_t, void* data) {
  Search& s = *static_cast<Search*>(data);
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, s.library) == nullptr) return 0;
  s.found = true;
  patch_object(info, s);
  return 1;   // the first match only
}

}  // namespace

size_t patch_imports(const char* library, const char* symbol, void* replacement) noexcept {
  Search s{library, symbol, replacement, 0, false};
  dl_iterate_phdr(visit, &s);
  return s.patched;
}

}  // namespace fikit::hook::preempt
