# Provides the pinned ggml source tree and adds it as a static library.
#
# Source: the sdist of `libggml-python==0.20.2.post1` on PyPI, which carries the
# complete ggml 0.20.2 tree (7 MB, vs 77 MB for llama-cpp-python's vendored copy).
# It is the exact tree the earlier port's figures in PERFORMANCE.md were taken
# with, and it has every operation the Chatterbox graphs need.
#
# GGML_SOURCE_DIR (CMake variable or environment) points at a ggml tree (or at an
# unpacked sdist holding ggml/) and skips the download. Patches from patches/*.patch
# are applied, in name order, to a copy inside the build dir, never to the user's tree.

set(GGML_SDIST_URL "https://files.pythonhosted.org/packages/c7/d1/630570961ac1bc3471ccbb81e6376273d71a9063edc8b00b950a32a5daee/libggml_python-0.20.2.post1.tar.gz"
    CACHE STRING "URL of the pinned ggml source distribution")
set(GGML_SDIST_SHA256 "e47ff53506342959ffb3ce15380b82828fea10ec5f208f9ef6915895f1a7a176")
set(GGML_PIN_VERSION "0.20.2")

if(NOT GGML_SOURCE_DIR AND DEFINED ENV{GGML_SOURCE_DIR})
    set(GGML_SOURCE_DIR "$ENV{GGML_SOURCE_DIR}")
endif()

set(_ggml_work "${CMAKE_BINARY_DIR}/_ggml")
if(GGML_SOURCE_DIR)
    if(EXISTS "${GGML_SOURCE_DIR}/ggml/include/ggml.h")
        set(_ggml_src "${GGML_SOURCE_DIR}/ggml")
    elseif(EXISTS "${GGML_SOURCE_DIR}/include/ggml.h")
        set(_ggml_src "${GGML_SOURCE_DIR}")
    else()
        message(FATAL_ERROR "GGML_SOURCE_DIR=${GGML_SOURCE_DIR} holds no ggml tree (include/ggml.h not found)")
    endif()
    message(STATUS "ggml: using local source ${_ggml_src}")
else()
    set(_archive "${_ggml_work}/libggml_python-0.20.2.post1.tar.gz")
    # file(DOWNLOAD) with EXPECTED_HASH skips the transfer when the kept file already matches.
    if(NOT EXISTS "${_archive}")
        message(STATUS "ggml: downloading pinned source ${GGML_SDIST_URL}")
    endif()
    file(DOWNLOAD "${GGML_SDIST_URL}" "${_archive}"
         EXPECTED_HASH SHA256=${GGML_SDIST_SHA256} TLS_VERIFY ON STATUS _dl)
    list(GET _dl 0 _dl_code)
    if(NOT _dl_code EQUAL 0)
        list(GET _dl 1 _dl_msg)
        message(FATAL_ERROR "ggml: download failed (${_dl_msg}). Set GGML_SOURCE_DIR to an unpacked ggml tree to build offline.")
    endif()
    set(_unpacked "${_ggml_work}/sdist")
    if(NOT EXISTS "${_unpacked}/.complete-${GGML_SDIST_SHA256}")
        file(REMOVE_RECURSE "${_unpacked}")
        file(ARCHIVE_EXTRACT INPUT "${_archive}" DESTINATION "${_unpacked}")
        file(TOUCH "${_unpacked}/.complete-${GGML_SDIST_SHA256}")
    endif()
    set(_ggml_src "${_unpacked}/libggml_python-0.20.2.post1/ggml")
endif()

# Apply patches to a private copy; the copy is keyed by the patches' content so an
# edited patch set re-applies from a clean tree.
file(GLOB _patches "${CMAKE_CURRENT_LIST_DIR}/../../patches/*.patch")
list(SORT _patches)
if(_patches)
    set(_patch_key "")
    foreach(_p IN LISTS _patches)
        file(SHA256 "${_p}" _h)
        string(APPEND _patch_key "${_h}")
    endforeach()
    string(SHA256 _patch_key "${_ggml_src}${_patch_key}")
    set(_patched "${_ggml_work}/patched")
    if(NOT EXISTS "${_patched}/.complete-${_patch_key}")
        file(REMOVE_RECURSE "${_patched}")
        file(COPY "${_ggml_src}/" DESTINATION "${_patched}")
        foreach(_p IN LISTS _patches)
            message(STATUS "ggml: applying ${_p}")
            execute_process(COMMAND patch -p1 --forward --batch -i "${_p}"
                            WORKING_DIRECTORY "${_patched}" RESULT_VARIABLE _rc)
            if(NOT _rc EQUAL 0)
                message(FATAL_ERROR "ggml: patch ${_p} failed to apply")
            endif()
        endforeach()
        file(TOUCH "${_patched}/.complete-${_patch_key}")
    endif()
    set(_ggml_src "${_patched}")
endif()

# ggml the way llama.cpp ships it: shared libraries (ggml, ggml-base) beside
# engine_native._core, and every backend as a module loaded at run time
# (GGML_BACKEND_DL; core/backend.cpp loads them from the folder of the ggml library).
set(BUILD_SHARED_LIBS ON CACHE BOOL "" FORCE)
set(GGML_BACKEND_DL ON CACHE BOOL "" FORCE)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(GGML_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(GGML_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
set(GGML_CCACHE OFF CACHE BOOL "" FORCE)
# Threads of ggml's CPU backend: OpenMP (ON; engine_native sets OMP_WAIT_POLICY=PASSIVE)
# or ggml's own thread pool (OFF): core/backend.cpp then gives every CPU backend a
# persistent pool whose threads spin a bounded time at barriers and between graphs, then
# sleep (patches/0004, CBS_THREAD_POLL). Measured on the shared 2-core machine
# (benchmarks/bench_threads.py, T3 Q4_0 ms/token, 2026-12-01): the pool equals OpenMP
# PASSIVE or better when the machine is merely busy (46 vs 49, 187 vs 218, 103 vs 108) and
# 1.6-2.5x slower with two processes burning both cores (182 vs 116, 228 vs 130, 147 vs 58,
# 164 vs 79); ACTIVE is 10-50x slower than
# both whenever the machine is busy. OpenMP stays the default until the pool is measured
# on an idle machine, where the bounded spin should pay.
option(CBS_OPENMP "thread ggml's CPU backend with OpenMP instead of its own thread pool" ON)
set(GGML_OPENMP ${CBS_OPENMP} CACHE BOOL "" FORCE)
# llamafile's tiled sgemm: much faster batched matmuls (prompt passes, S3Gen) on the CPU.
set(GGML_LLAMAFILE ON CACHE BOOL "use llamafile sgemm kernels")

# The CPU backend in every x86-64 ISA variant (SSE4.2 ... AVX-512, AMX), the best one the
# running CPU supports chosen at load, so a wheel or the frozen app runs on any x86-64
# CPU. OFF: one variant for the build machine's CPU (quicker builds for development).
option(CBS_CPU_ALL_VARIANTS "build the CPU backend for every x86-64 ISA level, chosen at run time" ON)
if(CBS_CPU_ALL_VARIANTS AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
    set(GGML_CPU_ALL_VARIANTS ON CACHE BOOL "" FORCE)
    set(GGML_NATIVE OFF CACHE BOOL "" FORCE)
else()
    # ggml refuses GGML_NATIVE with loadable backends: name the build CPU's extensions.
    set(GGML_CPU_ALL_VARIANTS OFF CACHE BOOL "" FORCE)
    set(GGML_NATIVE OFF CACHE BOOL "" FORCE)
    if(EXISTS "/proc/cpuinfo")
        file(STRINGS "/proc/cpuinfo" _flags REGEX "^flags" LIMIT_COUNT 1)
        string(REPLACE " " ";" _flags "${_flags}")
        foreach(_pair "sse4_2:SSE42" "avx:AVX" "avx2:AVX2" "fma:FMA" "f16c:F16C" "bmi2:BMI2" "avx_vnni:AVX_VNNI"
                      "avx512f:AVX512" "avx512vbmi:AVX512_VBMI" "avx512_vnni:AVX512_VNNI" "avx512_bf16:AVX512_BF16")
            string(REPLACE ":" ";" _pair "${_pair}")
            list(GET _pair 0 _cpu)
            list(GET _pair 1 _ggml)
            if("${_cpu}" IN_LIST _flags)
                set(GGML_${_ggml} ON CACHE BOOL "" FORCE)
            endif()
        endforeach()
    endif()
endif()

# GPU backends: CBS_GPU (CMake variable or environment) = auto | none | a list of cuda,
# vulkan. auto builds a backend when its toolchain is installed AND a GPU is present on
# the build machine (a CPU-only machine with nvcc, such as CI, is not kept busy for an
# hour compiling CUDA kernels nobody there can run); naming one builds it or fails.
if(NOT DEFINED CBS_GPU OR CBS_GPU STREQUAL "")
    if(DEFINED ENV{CBS_GPU} AND NOT "$ENV{CBS_GPU}" STREQUAL "")
        set(CBS_GPU "$ENV{CBS_GPU}")
    else()
        set(CBS_GPU "auto")
    endif()
endif()
string(TOLOWER "${CBS_GPU}" _gpu)
string(REPLACE "," ";" _gpu "${_gpu}")
set(_want_cuda OFF)
set(_want_vulkan OFF)
if(_gpu STREQUAL "auto")
    set(_nvidia_gpu OFF)
    set(_any_gpu OFF)
    if(EXISTS "/dev/nvidia0" OR EXISTS "/proc/driver/nvidia/version")
        set(_nvidia_gpu ON)
        set(_any_gpu ON)
    endif()
    file(GLOB _render_nodes "/dev/dri/renderD*")
    if(_render_nodes)
        set(_any_gpu ON)
    endif()
    if(_nvidia_gpu)
        include(CheckLanguage)
        check_language(CUDA)
        if(CMAKE_CUDA_COMPILER)
            find_package(CUDAToolkit QUIET)
            if(TARGET CUDA::cublas)
                set(_want_cuda ON)
            endif()
        endif()
    endif()
    if(_any_gpu)
        find_package(Vulkan QUIET COMPONENTS glslc)
        find_package(SPIRV-Headers CONFIG QUIET)
        # ggml 0.20.2's Vulkan backend uses VK_EXT_layer_settings: Debian 12's headers
        # (1.3.239) are too old; Ubuntu 24.04's (1.3.275) do.
        if(Vulkan_FOUND AND Vulkan_glslc_FOUND AND SPIRV-Headers_FOUND)
            if(Vulkan_VERSION VERSION_GREATER_EQUAL "1.3.275")
                set(_want_vulkan ON)
            else()
                message(STATUS "Vulkan headers ${Vulkan_VERSION} are older than 1.3.275: no Vulkan backend")
            endif()
        endif()
    endif()
    message(STATUS "GPU backends (CBS_GPU=auto): GPU present ${_any_gpu}, CUDA ${_want_cuda}, Vulkan ${_want_vulkan}")
elseif(NOT _gpu STREQUAL "none")
    foreach(_g IN LISTS _gpu)
        if(_g STREQUAL "cuda")
            set(_want_cuda ON)
        elseif(_g STREQUAL "vulkan")
            set(_want_vulkan ON)
        else()
            message(FATAL_ERROR "CBS_GPU=${CBS_GPU}: expected auto, none, or a list of cuda, vulkan")
        endif()
    endforeach()
endif()
set(GGML_CUDA ${_want_cuda} CACHE BOOL "" FORCE)
set(GGML_VULKAN ${_want_vulkan} CACHE BOOL "" FORCE)
# CUDA graphs (off unless asked for outside llama.cpp): T3's per-token graph, the same from
# one token to the next, is then replayed as one launch instead of ~500 kernel launches.
set(GGML_CUDA_GRAPHS ON CACHE BOOL "" FORCE)
if(_want_cuda AND NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT GGML_NATIVE)
    # A shipped build: ggml's default list (PTX for older GPUs, real code for recent ones).
    message(STATUS "CUDA architectures: ggml's defaults (set CMAKE_CUDA_ARCHITECTURES for fewer)")
endif()

# Every ggml library and backend module lands beside _core in the build tree too.
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/engine_native")
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/engine_native")
add_subdirectory("${_ggml_src}" "${CMAKE_BINARY_DIR}/ggml-build" EXCLUDE_FROM_ALL)
set(GGML_USED_SOURCE_DIR "${_ggml_src}")

# One file per library (libggml.so, not libggml.so.0.20.2 and two links: a wheel has no
# links), found beside each other through $ORIGIN.
# (GGML_AVAILABLE_BACKENDS is a cache variable: it may name targets of an earlier configure.)
set(CBS_GGML_LIBRARIES ggml ggml-base)
foreach(_t IN LISTS GGML_AVAILABLE_BACKENDS)
    if(TARGET ${_t})
        list(APPEND CBS_GGML_LIBRARIES ${_t})
    endif()
endforeach()
list(REMOVE_DUPLICATES CBS_GGML_LIBRARIES)
foreach(_t IN LISTS CBS_GGML_LIBRARIES)
    set_property(TARGET ${_t} PROPERTY VERSION)
    set_property(TARGET ${_t} PROPERTY SOVERSION)
    set_property(TARGET ${_t} PROPERTY PUBLIC_HEADER)
    set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN")
endforeach()
message(STATUS "ggml libraries: ${CBS_GGML_LIBRARIES}")
