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

# cuckoo_test(NAME name SRCS a.cc b.cc DEPS lib... [LABELS l...])
# One GoogleTest binary; every TEST in it becomes its own CTest test.
function(cuckoo_test)
  cmake_parse_arguments(T "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gmock GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${T_LABELS}")
endfunction()
