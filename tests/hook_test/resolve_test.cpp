// Runs under LD_PRELOAD=libfikit_hook.so with the fake driver (fake_driver.cpp) as libcuda.so.1:
// every resolution path hands out the hook's wrapper, and each wrapper reaches the right real function.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

namespace {

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

void* driver() {
  static void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return handle;
}

std::string module_of(void* p) {
  Dl_info info{};
  return p != nullptr && dladdr(p, &info) != 0 && info.dli_fname ? info.dli_fname : "";
}

bool in_hook(void* p) { return module_of(p).find("libfikit_hook.so") != std::string::npos; }

std::string last_call() { return *static_cast<const char**>(dlsym(driver(), "fake_last_call")); }

std::string call_launch(void* fn) {
  reinterpret_cast<LaunchFn>(fn)(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  return last_call();
}

TEST(Resolve, TestRunsUnderTheHookWithTheFakeDriver) {
  ASSERT_NE(driver(), nullptr) << dlerror();
  ASSERT_NE(dlsym(driver(), "fake_last_call"), nullptr);
  ASSERT_TRUE(in_hook(dlsym(RTLD_DEFAULT, "cuLaunchKernel"))) << "run me with LD_PRELOAD=libfikit_hook.so";
}

TEST(Resolve, DlsymReturnsWrappersThatReachTheirOwnRealFunction) {
  void* plain = dlsym(driver(), "cuLaunchKernel");
  void* ptsz = dlsym(driver(), "cuLaunchKernel_ptsz");
  EXPECT_TRUE(in_hook(plain));
  EXPECT_TRUE(in_hook(ptsz));
  EXPECT_NE(plain, ptsz);
  EXPECT_EQ(call_launch(plain), "cuLaunchKernel");
  EXPECT_EQ(call_launch(ptsz), "cuLaunchKernel_ptsz");
}

TEST(Resolve, ExportedSymbolResolvesTheRealFunctionOnFirstCall) {
  ASSERT_NE(driver(), nullptr);   // the program loaded the driver before calling into it
  void* exported = dlsym(RTLD_DEFAULT, "cuCtxSynchronize");
  ASSERT_TRUE(in_hook(exported));
  reinterpret_cast<CUresult (*)()>(exported)();
  EXPECT_EQ(last_call(), "cuCtxSynchronize");
}

TEST(Resolve, GetProcAddressHonoursThePerThreadFlag) {
  auto get = reinterpret_cast<GetProcV2>(dlsym(driver(), "cuGetProcAddress_v2"));
  ASSERT_TRUE(in_hook(reinterpret_cast<void*>(get)));
  void* legacy = nullptr;
  void* per_thread = nullptr;
  ASSERT_EQ(get("cuLaunchKernel", &legacy, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr), CUDA_SUCCESS);
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(get("cuLaunchKernel", &per_thread, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status),
            CUDA_SUCCESS);
  EXPECT_TRUE(in_hook(legacy));
  EXPECT_TRUE(in_hook(per_thread));
  EXPECT_EQ(per_thread, dlsym(driver(), "cuLaunchKernel_ptsz"));
  EXPECT_EQ(call_launch(legacy), "cuLaunchKernel");
  EXPECT_EQ(call_launch(per_thread), "cuLaunchKernel_ptsz");
  // An entry point with no stream has one form under both flags, and is still wrapped.
  void* sync = nullptr;
  ASSERT_EQ(get("cuCtxSynchronize", &sync, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
            CUDA_SUCCESS);
  EXPECT_TRUE(in_hook(sync));
}

TEST(Resolve, GetProcAddressOfItselfReturnsTheWrapperOfTheAskedVersion) {
  auto get_v1 = reinterpret_cast<GetProcV1>(dlsym(driver(), "cuGetProcAddress"));
  ASSERT_TRUE(in_hook(reinterpret_cast<void*>(get_v1)));
  void* v1 = nullptr;
  void* v2 = nullptr;
  ASSERT_EQ(get_v1("cuGetProcAddress", &v1, 11030, 0), CUDA_SUCCESS);
  ASSERT_EQ(get_v1("cuGetProcAddress", &v2, 12000, 0), CUDA_SUCCESS);
  EXPECT_EQ(v1, reinterpret_cast<void*>(get_v1));
  EXPECT_EQ(v2, dlsym(driver(), "cuGetProcAddress_v2"));
  EXPECT_TRUE(in_hook(v2));
  // The wrapper handed out for itself keeps wrapping what it returns.
  void* launch = nullptr;
  ASSERT_EQ(reinterpret_cast<GetProcV2>(v2)("cuLaunchKernel", &launch, 13000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_TRUE(in_hook(launch));
}

TEST(Resolve, OlderAbiThanTheTablePassesThroughUnwrapped) {
  auto get = reinterpret_cast<GetProcV2>(dlsym(driver(), "cuGetProcAddress_v2"));
  void* old = nullptr;
  ASSERT_EQ(get("cuLaunchKernel", &old, 3000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(old, dlsym(driver(), "fake_pre_4000_launch"));
  EXPECT_FALSE(in_hook(old));
}

// cuGetProcAddress("cuGraphInstantiate") from CUDA 12.0 on returns cuGraphInstantiateWithFlags' ABI
// (the entry table's FIKIT_PROC_ALIAS row): it gets that wrapper, which reaches that real function.
TEST(Resolve, ARenamedEntryPointGetsTheWrapperOfItsNewAbi) {
  auto get = reinterpret_cast<GetProcV2>(dlsym(driver(), "cuGetProcAddress_v2"));
  void* renamed = nullptr;
  ASSERT_EQ(get("cuGraphInstantiate", &renamed, 12080, 0, nullptr), CUDA_SUCCESS);
  EXPECT_TRUE(in_hook(renamed));
  EXPECT_EQ(renamed, dlsym(driver(), "cuGraphInstantiateWithFlags"));
  CUgraphExec exec = nullptr;
  reinterpret_cast<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>(renamed)(&exec, nullptr, 0);
  EXPECT_EQ(last_call(), "cuGraphInstantiateWithFlags");
}

TEST(Resolve, NonCudaNamesAreUntouched) {
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "strlen"), dlvsym(RTLD_DEFAULT, "strlen", "GLIBC_2.2.5"));
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "no_such_symbol_fikit"), nullptr);
  // A cu* name that the table does not list comes from the driver as is.
  EXPECT_EQ(dlsym(driver(), "cuNotInTheTable"), nullptr);
  EXPECT_FALSE(in_hook(dlsym(driver(), "fake_pre_4000_launch")));
}

}  // namespace
