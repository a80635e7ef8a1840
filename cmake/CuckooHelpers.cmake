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

# cuckoo_warnings: the warning flags of the project's own targets (core,
# server, client, bench, tests), which link it PRIVATE; never third-party or
# generated code (cuckoo_proto: protoc's output may warn). Warnings are
# errors. -Wno-missing-field-initializers: the code base builds structs with
# designated initializers that leave the other fields at their defaults
# (Options{.dir = d}) on purpose, which -Wextra would flag. With clang, also
# -Wthread-safety: the ABSL_GUARDED_BY / ABSL_*_LOCKS_REQUIRED annotations
# are checked (the clang build CI does is scripts/fuzz.sh).
#
# -Wno-tsan (g++ with CUCKOO_SANITIZE=thread): g++ warns that TSan does not
# model std::atomic_thread_fence. CuckooFilter's sequence lock orders its
# lock-free reads with fences, so TSan cannot check that ordering; it still
# checks that every access racing there is atomic (TSan builds read only
# aligned atomic words, core/cuckoo_table.cc), which is what it can do.
add_library(cuckoo_warnings INTERFACE)
target_compile_options(cuckoo_warnings INTERFACE
  -Wall -Wextra -Werror -Wno-missing-field-initializers
  $<$<CXX_COMPILER_ID:Clang>:-Wthread-safety>
  $<$<AND:$<CXX_COMPILER_ID:GNU>,$<STREQUAL:${CUCKOO_SANITIZE},thread>>:-Wno-tsan>)

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
  target_compile_options(${T_NAME} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
  list(LENGTH T_LABELS label_count)
  if(label_count GREATER 1)
    message(FATAL_ERROR "cuckoo_test(${T_NAME}): one label at most, not ${T_LABELS}")
  endif()
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${T_LABELS}")
endfunction()

# cuckoo_library(NAME name SRCS a.cc... [PUBLIC lib...] [PRIVATE lib...])
# One folder's library: its headers are included by path from the project
# root ("server/wal/wal.h"), its own code warning-free.
function(cuckoo_library)
  cmake_parse_arguments(L "" "NAME" "SRCS;PUBLIC;PRIVATE" ${ARGN})
  add_library(${L_NAME} ${L_SRCS})
  target_include_directories(${L_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${L_NAME} PUBLIC ${L_PUBLIC} PRIVATE ${L_PRIVATE} cuckoo_warnings)
endfunction()
