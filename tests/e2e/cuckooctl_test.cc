// Placeholder: tests arrive with the tool they test.
#include "tests/e2e/process.h"
