"""A stand-in job for tests/integration/test_forked.py: writes what it sees as a fresh `python -m` process would
see it, then sleeps or exits with the code it is given."""

import json
import os
import sys
import time

if __name__ == "__main__":
    out, code, wait_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    seen = {"pid": os.getpid(), "session": os.getsid(0), "cwd": os.getcwd(), "argv": sys.argv[1:],
            "name": __name__, "var": os.environ.get("JOB_PROBE_VAR"), "test": os.environ.get("PYTEST_CURRENT_TEST"),
            "stdin": sys.stdin.read(), "torch_loaded": "torch" in sys.modules}
    with open(out, "w") as fh:
        json.dump(seen, fh)
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    time.sleep(wait_s)
    sys.exit(code)
