CLAIM = "An experiment that never returns, and starts a process that never ends either."
EXPECTED = "true"
TIMEOUT_S = 3


def run() -> str:
    import os
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["TORCHPACT_TEST_PIDFILE"], "w") as fh:
        fh.write(str(child.pid))
    time.sleep(600)
    return "true"
