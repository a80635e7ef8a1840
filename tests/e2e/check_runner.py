"""Runs the checks of a tests/e2e check script (python_client_check.py,
python_security_check.py, python_wheel_check.py): each named method of an
object, in the order given, printing "ok <check>" or "FAIL <check>" and its
traceback (the name without its "check_"), then "<n> checks passed" or
"<failed> of <n> checks FAILED". Returns the exit status, 0 or 1."""

import sys
import traceback


def run_checks(checks, names):
    failed = 0
    for name in names:
        short = name[len("check_"):]
        try:
            getattr(checks, name)()
        except Exception:  # pylint: disable=broad-except
            failed += 1
            print(f"FAIL {short}")
            traceback.print_exc(file=sys.stdout)
        else:
            print(f"ok {short}")
        sys.stdout.flush()
    if failed:
        print(f"{failed} of {len(names)} checks FAILED")
        return 1
    print(f"{len(names)} checks passed")
    return 0
