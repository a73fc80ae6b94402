# Sanitizer and fuzzing builds (scripts/sanitizer_tests.sh, scripts/fuzz.sh; docs/FUZZING.md).
#
#   CBS_SANITIZE=address,undefined   every C/C++ unit (ggml and the engine) compiled and linked
#                                    with -fsanitize=...; a shared library leaves the runtime to
#                                    the program (Python: LD_PRELOAD of the ASan runtime)
#   CBS_FUZZ=ON                      libFuzzer targets of engine_native/fuzz/ (clang only); every
#                                    unit, ggml's gguf parser included, gets libFuzzer's coverage
#                                    instrumentation (-fsanitize=fuzzer-no-link), whose hooks the
#                                    sanitizer runtime defines as no-ops outside a fuzzer, so the
#                                    same build's _core still loads into Python
# Included before ggml is added, so ggml gets the same flags, except the CPU backend's kernels
# (ggml-cpu*: arithmetic over buffers, no parsing): AddressSanitizer only, which finds a
# kernel reading past a tensor as well, at a fraction of the compile time of UBSan's and the
# coverage hooks' instrumentation of those large files. Line tables (-gline-tables-only) are
# all a sanitizer report needs to name file and line.
set(CBS_SANITIZE "" CACHE STRING "sanitizers to build with, e.g. address,undefined (empty: none)")
option(CBS_FUZZ "build the libFuzzer targets of engine_native/fuzz (needs clang)" OFF)

if(CBS_SANITIZE)
    add_compile_options(-fsanitize=${CBS_SANITIZE} -fno-omit-frame-pointer -gline-tables-only)
    add_link_options(-fsanitize=${CBS_SANITIZE})
    message(STATUS "sanitizers: ${CBS_SANITIZE}")
endif()
if(CBS_FUZZ)
    if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
        message(FATAL_ERROR "CBS_FUZZ needs clang (libFuzzer); configure with CC=clang-14 CXX=clang++-14")
    endif()
    add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# After engine_native/CMakeLists.txt is read (the ggml targets exist by then).
function(_cbs_lighter_cpu_backend)
    get_property(_targets DIRECTORY "${GGML_USED_SOURCE_DIR}/src" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(_t IN LISTS _targets)
        if(_t MATCHES "^ggml-cpu")
            if(CBS_SANITIZE MATCHES "undefined")
                target_compile_options(${_t} PRIVATE -fno-sanitize=undefined)
            endif()
            if(CBS_FUZZ)
                target_compile_options(${_t} PRIVATE -fno-sanitize=fuzzer-no-link)
            endif()
        endif()
    endforeach()
endfunction()
if(CBS_SANITIZE OR CBS_FUZZ)
    cmake_language(DEFER CALL _cbs_lighter_cpu_backend)
endif()
