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

# Static ggml, position independent so it links into the Python extension module.
set(BUILD_SHARED_LIBS OFF CACHE BOOL "" FORCE)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(GGML_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(GGML_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
set(GGML_BACKEND_DL OFF CACHE BOOL "" FORCE)
set(GGML_NATIVE ON CACHE BOOL "optimize ggml for the build machine's CPU")
set(GGML_CCACHE OFF CACHE BOOL "" FORCE)
# llamafile's tiled sgemm: much faster batched matmuls (prompt passes, S3Gen) on the CPU.
set(GGML_LLAMAFILE ON CACHE BOOL "use llamafile sgemm kernels")
add_subdirectory("${_ggml_src}" "${CMAKE_BINARY_DIR}/ggml-build" EXCLUDE_FROM_ALL)
set(GGML_USED_SOURCE_DIR "${_ggml_src}")
