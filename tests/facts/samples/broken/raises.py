CLAIM = "An experiment that raises."
EXPECTED = "true"


def run() -> str:
    print("about to fail")
    raise RuntimeError("the experiment broke")
