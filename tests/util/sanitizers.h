// Which sanitizer a test is built with, the same under g++ (which defines
// __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__) and clang 14 (which defines
// neither and answers __has_feature): CUCKOO_ASAN and CUCKOO_TSAN are 1 or
// undefined, kSanitized is true under either.
#ifndef CUCKOO_TESTS_UTIL_SANITIZERS_H_
#define CUCKOO_TESTS_UTIL_SANITIZERS_H_

#if defined(__SANITIZE_ADDRESS__)
#define CUCKOO_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUCKOO_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define CUCKOO_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUCKOO_TSAN 1
#endif
#endif

namespace cuckoo::testing {

#if defined(CUCKOO_ASAN) || defined(CUCKOO_TSAN)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_SANITIZERS_H_
