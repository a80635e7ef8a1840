# Small helpers so each target in the tree is a few lines.

function(cuckoo_enable_sanitizers kind)
  if(kind STREQUAL "")
    return()
  elseif(kind STREQUAL "address")
    set(flags -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  elseif(kind STREQUAL "thread")
    set(flags -fsanitize=thread -fno-omit-frame-pointer)
  else()
    message(FATAL_ERROR "CUCKOO_SANITIZE must be empty, 'address' or 'thread', not '${kind}'")
  endif()
  add_compile_options(${flags})
  add_link_options(${flags})
endfunction()

# cuckoo_use_fast_linker(): links with LLVM's lld when the compiler can
# (Debian's lld, scripts/install-deps.sh), else with the system's default.
# The ASan tree's link steps (60 test binaries, the fuzzers, the tools) took
# 264 s of ninja edge time with GNU ld (beside the kill -9 loops, as in
# scripts/test.sh) and 97 s with lld (alone). -DCUCKOO_LINKER=default keeps
# the default linker.
set(CUCKOO_LINKER "lld" CACHE STRING "Linker: 'lld' when the compiler can use it, or 'default'")
function(cuckoo_use_fast_linker)
  if(CUCKOO_LINKER STREQUAL "default")
    return()
  elseif(NOT CUCKOO_LINKER STREQUAL "lld")
    message(FATAL_ERROR "CUCKOO_LINKER must be 'lld' or 'default', not '${CUCKOO_LINKER}'")
  endif()
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld CUCKOO_HAVE_LLD)
  if(CUCKOO_HAVE_LLD)
    add_link_options(-fuse-ld=lld)
  endif()
endfunction()

# cuckoo_warnings: the warning flags of the project's own targets (core,
# server, client, bench, tests), which link it PRIVATE; never third-party or
# generated code (cuckoo_proto: protoc's output may warn). Warnings are
# errors. -Wno-missing-field-initializers: the code base builds structs with
# designated initializers that leave the other fields at their defaults
# (Options{.dir = d}) on purpose, which -Wextra would flag. With clang, also
# -Wthread-safety: the ABSL_GUARDED_BY / ABSL_*_LOCKS_REQUIRED annotations
# are checked (CI's clang build is the ASan build, scripts/build.sh asan).
#
# -Wno-tsan (g++ with CUCKOO_SANITIZE=thread): g++ warns that TSan does not
# model std::atomic_thread_fence. CuckooFilter's sequence lock orders its
# lock-free reads with fences, so TSan cannot check that ordering; it still
# checks that every access racing there is atomic (TSan builds read only
# aligned atomic words, core/internal/cuckoo_table.cc), which is what it can do.
add_library(cuckoo_warnings INTERFACE)
target_compile_options(cuckoo_warnings INTERFACE
  -Wall -Wextra -Werror -Wno-missing-field-initializers
  $<$<CXX_COMPILER_ID:Clang>:-Wthread-safety>
  $<$<AND:$<CXX_COMPILER_ID:GNU>,$<STREQUAL:${CUCKOO_SANITIZE},thread>>:-Wno-tsan>)

# Under the sanitizers the tests' own code compiles without optimisation
# (-O0; the libraries under test keep the build's -O1): half the compile
# time of a test file (filter_service_test.cc: 30.6 s -> 14.8 s of CPU with
# clang's ASan), and the code a test runs is the libraries'.
if(CUCKOO_SANITIZE)
  set(CUCKOO_TEST_CODE_OPTIONS -O0)
else()
  set(CUCKOO_TEST_CODE_OPTIONS)
endif()

# cuckoo_test(NAME name SRCS a.cc b.cc DEPS lib... [LABELS l])
# One GoogleTest binary; every TEST in it becomes its own CTest test. One
# label at most: gtest_discover_tests passes its properties on as a list, so
# a second label would be read as the next property's name and dropped.
function(cuckoo_test)
  cmake_parse_arguments(T "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gmock GTest::gtest GTest::gtest_main
                                          cuckoo_warnings)
  # g++ 12 reports a false -Wrestrict (a memcpy of 2^63 bytes that "may
  # overlap") inside libstdc++'s std::operator+(const char*, std::string&&),
  # which the tests use all over ("k" + std::to_string(i)). Off for the
  # tests only: the libraries and binaries keep the check.
  target_compile_options(${T_NAME} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
                                            ${CUCKOO_TEST_CODE_OPTIONS})
  cuckoo_precompile_headers(${T_NAME} TESTS)
  list(LENGTH T_LABELS label_count)
  if(label_count GREATER 1)
    message(FATAL_ERROR "cuckoo_test(${T_NAME}): one label at most, not ${T_LABELS}")
  endif()
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${T_LABELS}")
endfunction()

# cuckoo_library(NAME name SRCS a.cc... [PUBLIC lib...] [PRIVATE lib...])
# One folder's library: its headers are included by path from the project
# root ("server/wal/wal.h"), its own code warning-free, compiled with the
# precompiled header (cuckoo_precompile_headers, below; clang only).
function(cuckoo_library)
  cmake_parse_arguments(L "" "NAME" "SRCS;PUBLIC;PRIVATE" ${ARGN})
  add_library(${L_NAME} ${L_SRCS})
  target_include_directories(${L_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${L_NAME} PUBLIC ${L_PUBLIC} PRIVATE ${L_PRIVATE} cuckoo_warnings)
  cuckoo_precompile_headers(${L_NAME})
endfunction()

# cuckoo_precompile_headers(TARGET [TESTS])
# With clang, compiles TARGET with the project's one precompiled header (two:
# the tests' adds GoogleTest and gMock): the third-party headers that make a server
# source file ~290,000 lines after preprocessing (gRPC and the generated
# stubs, protobuf, Boost.Asio, spdlog, abseil), parsed once per build tree
# instead of once per file. The header is built once, by the target
# cuckoo_pch (cuckoo_pch_test), and every other target reuses it
# (REUSE_FROM), so they must compile with the same flags: the host targets
# take cuckoo_warnings, and each user gets cuckoo_pch_usage, the macros the
# headers were compiled with (spdlog's, fmt's, Boost's, GoogleTest's) and
# the generated headers' directory, whether or not it links those
# libraries. A mismatch does not go unnoticed: g++ rejects the header with
# -Winvalid-pch, an error under -Werror. Only third-party headers are in it,
# so clang's -Wthread-safety still sees every function of ours.
# -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON builds without it (e.g. to check
# that every file includes what it uses).
set(CUCKOO_PCH_HEADERS
  <algorithm> <atomic> <chrono> <cstdint> <cstring> <deque> <filesystem> <fstream> <functional>
  <map> <memory> <mutex> <optional> <sstream> <string> <string_view> <thread> <utility> <vector>
  [["absl/container/flat_hash_map.h"]] [["absl/status/status.h"]] [["absl/status/statusor.h"]]
  [["absl/strings/str_cat.h"]] [["absl/strings/str_format.h"]] [["absl/synchronization/mutex.h"]]
  [["absl/time/time.h"]] [["absl/types/span.h"]]
  [["spdlog/spdlog.h"]]
  [["boost/asio/io_context.hpp"]] [["boost/asio/ip/tcp.hpp"]] [["boost/asio/steady_timer.hpp"]]
  <grpcpp/grpcpp.h>
  [["cuckoo/v1/filter_service.grpc.pb.h"]] [["grpc/health/v1/health.grpc.pb.h"]])

function(_cuckoo_pch_host host)
  if(NOT TARGET cuckoo_pch_usage)
    add_library(cuckoo_pch_usage INTERFACE)
    target_compile_definitions(cuckoo_pch_usage INTERFACE
      $<TARGET_PROPERTY:spdlog::spdlog,INTERFACE_COMPILE_DEFINITIONS>
      $<TARGET_PROPERTY:fmt::fmt,INTERFACE_COMPILE_DEFINITIONS>
      $<TARGET_PROPERTY:Boost::headers,INTERFACE_COMPILE_DEFINITIONS>)
    target_include_directories(cuckoo_pch_usage SYSTEM INTERFACE
      $<TARGET_PROPERTY:cuckoo_proto,INTERFACE_INCLUDE_DIRECTORIES>)
    # -pthread (gRPC's and abseil's targets compile the header with it).
    target_compile_options(cuckoo_pch_usage INTERFACE -pthread)
  endif()
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/generated/${host}.cc
       CONTENT "// The precompiled header's host (cmake/CuckooHelpers.cmake).\n")
  add_library(${host} OBJECT ${CMAKE_BINARY_DIR}/generated/${host}.cc)
  # Linked for their include directories and the order of the build (the
  # generated headers first); an object library links nothing.
  target_link_libraries(${host} PRIVATE cuckoo_pch_usage cuckoo_proto gRPC::grpc++ spdlog::spdlog
                                        Boost::headers absl::status absl::statusor absl::strings
                                        absl::str_format absl::synchronization absl::time
                                        absl::flat_hash_map absl::span cuckoo_warnings)
  set(headers ${CUCKOO_PCH_HEADERS})
  if(host STREQUAL "cuckoo_pch_test")
    target_link_libraries(${host} PRIVATE GTest::gmock GTest::gtest)
    target_compile_options(${host} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
                                           ${CUCKOO_TEST_CODE_OPTIONS})
    list(APPEND headers <gmock/gmock.h> <gtest/gtest.h>)
  endif()
  target_precompile_headers(${host} PRIVATE ${headers})
endfunction()

function(cuckoo_precompile_headers target)
  cmake_parse_arguments(P "TESTS" "" "" ${ARGN})
  # clang only. clang reads a precompiled header lazily, and its ASan build
  # of a server file takes 20-40% less CPU time with it (persistence.cc
  # 27.7 s -> 19.8 s, filter_service_test.cc 38.4 s -> 30.8 s; the header
  # itself 7 s). g++ maps in the whole 340 MB header for every file and
  # gained nothing (persistence.cc 29.6 s -> 40.7 s, the header 23 s).
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    return()
  endif()
  set(host cuckoo_pch)
  if(P_TESTS)
    set(host cuckoo_pch_test)
  endif()
  if(NOT TARGET ${host})
    _cuckoo_pch_host(${host})
  endif()
  target_link_libraries(${target} PRIVATE cuckoo_pch_usage)
  if(P_TESTS)
    target_compile_definitions(${target} PRIVATE
      $<TARGET_PROPERTY:GTest::gtest,INTERFACE_COMPILE_DEFINITIONS>)
  endif()
  target_precompile_headers(${target} REUSE_FROM ${host})
endfunction()

# cuckoo_fuzz_instrument(TARGET...): with CUCKOO_FUZZ (clang, set by
# scripts/build.sh asan), the libraries the fuzzers of tests/fuzz run get
# libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link), so the
# ASan build's fuzzers fuzz into them; the fuzzers' own sources get it from
# -fsanitize=fuzzer. Only those libraries: the coverage counters and
# comparison hooks would slow every other test of that build. They compile
# without the precompiled header, which clang refuses to use across the
# instrumentation's flag.
function(cuckoo_fuzz_instrument)
  if(NOT CUCKOO_FUZZ)
    return()
  endif()
  foreach(t ${ARGN})
    target_compile_options(${t} PRIVATE -fsanitize=fuzzer-no-link)
    set_target_properties(${t} PROPERTIES DISABLE_PRECOMPILE_HEADERS ON)
  endforeach()
endfunction()
