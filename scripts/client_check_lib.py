"""What scripts/openai_check.py and scripts/anthropic_check.py share: named
checks that report and go on, and the list of those that failed."""
import time

failures = []


def check(name, fn):
    t0 = time.monotonic()
    try:
        detail = fn()
    except Exception as e:  # every failure is reported, the run goes on
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}")
        return
    print(f"ok   {name} ({(time.monotonic() - t0) * 1e3:.0f} ms){': ' + detail if detail else ''}")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)
