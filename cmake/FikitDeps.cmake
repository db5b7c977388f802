# Every dependency comes from a Debian package (scripts/setup.sh installs them) or the CUDA toolkit.
find_package(Threads REQUIRED)

# Only the driver API headers are needed to build: no GPU, no libcuda at build time.
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND OR NOT EXISTS "${CUDAToolkit_INCLUDE_DIRS}/cuda.h")
  message(FATAL_ERROR "FIKIT needs the CUDA toolkit headers (cuda.h, cupti.h). Install the CUDA toolkit "
                      "into /usr/local/cuda, or pass -DCUDAToolkit_ROOT=/path/to/cuda.")
endif()
add_library(fikit_cuda_headers INTERFACE)
target_include_directories(fikit_cuda_headers SYSTEM INTERFACE ${CUDAToolkit_INCLUDE_DIRS})
find_path(FIKIT_CUPTI_INCLUDE_DIR cupti.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/extras/CUPTI/include)
if(FIKIT_CUPTI_INCLUDE_DIR)
  target_include_directories(fikit_cuda_headers SYSTEM INTERFACE ${FIKIT_CUPTI_INCLUDE_DIR})
else()
  message(FATAL_ERROR "cupti.h not found in the CUDA toolkit (${CUDAToolkit_INCLUDE_DIRS})")
endif()

find_package(SQLite3 REQUIRED)
find_package(Boost 1.74 REQUIRED)            # Asio is header-only
find_package(spdlog REQUIRED)                # used header-only: the GPU machine has another soname
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)   # the tools' JSON output (header-only)
# The metrics endpoint's exposition text (prometheus-cpp's TextSerializer; the daemon serves the HTTP
# itself): prometheus-cpp::core, a shared library (Debian ships no static one).
find_package(prometheus-cpp CONFIG REQUIRED)

# libsodium for the datagrams' HMAC (protocol/auth.cpp), linked statically so the hook and
# the daemon carry it: the GPU machine need not have it. Only HMAC-SHA256 is used; it is
# position-independent in Debian's archive (its random-number objects are not, and are not pulled in).
find_path(FIKIT_SODIUM_INCLUDE_DIR sodium.h)
find_library(FIKIT_SODIUM_STATIC NAMES libsodium.a)
if(NOT FIKIT_SODIUM_INCLUDE_DIR OR NOT FIKIT_SODIUM_STATIC)
  message(FATAL_ERROR "libsodium not found: install libsodium-dev (scripts/setup.sh does)")
endif()
add_library(fikit_sodium INTERFACE)
target_include_directories(fikit_sodium SYSTEM INTERFACE ${FIKIT_SODIUM_INCLUDE_DIR})
target_link_libraries(fikit_sodium INTERFACE ${FIKIT_SODIUM_STATIC})

# spdlog + fmt compiled into each program (header-only), so binaries built here run on the GPU
# machine, whose spdlog has a different soname.
add_library(fikit_spdlog INTERFACE)
target_link_libraries(fikit_spdlog INTERFACE spdlog::spdlog_header_only fmt::fmt-header-only)

if(FIKIT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(FIKIT_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
