CLAIM = "An experiment that works."
EXPECTED = "true"


def run() -> str:
    print("1 + 1 == 2")
    return "true"
