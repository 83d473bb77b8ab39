"""RLSIM_FUZZ_TIMES=1: print the slowest fuzzed command lines (CPU seconds) at the end of the session."""
import os

from .harness import TIMES


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("RLSIM_FUZZ_TIMES") and TIMES:
        print("\nslowest fuzzed commands (CPU s):")
        for seconds, argv in sorted(TIMES, key=lambda t: -t[0])[:12]:
            print(f"  {seconds:6.2f}  rlsim {' '.join(a[:60] for a in argv)}")
