#pragma once
// glibc's own dlsym, reached without passing through the hook's interposed dlsym.

namespace fikit::hook {

using DlsymFn = void* (*)(void* handle, const char* name);

// Looked up once with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), falling back to "GLIBC_2.2.5"
// (glibc before 2.34 kept dlsym in libdl). Never null: without it the process could not run.
DlsymFn real_dlsym() noexcept;

}  // namespace fikit::hook
